module xlb

go 1.26.8

require (
	github.com/BurntSushi/toml v1.6.0 // indirect
	github.com/google/gopacket v1.1.19 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	go.uber.org/multierr v1.10.0 // indirect
	go.uber.org/zap v1.28.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
