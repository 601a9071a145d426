package control

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestDriver(t *testing.T) {
	v := os.Getenv("CPDRV")
	if v == "" {
		t.Skip()
	}
	cfg := Config{Backends: 4, TableSize: 1021, Reps: 1}
	if m := os.Getenv("CPM"); m != "" {
		x, _ := strconv.Atoi(m)
		cfg.TableSize = uint32(x)
	}
	for _, s := range strings.Split(v, ",") {
		n, _ := strconv.Atoi(s)
		cfg.VIPs = append(cfg.VIPs, n)
	}
	if h := os.Getenv("CPH"); h != "" {
		cfg.HealthTargets, _ = strconv.Atoi(h)
		cfg.HealthInterval = 2 * time.Second
		cfg.HealthRounds = 2
	}
	r, err := Run(cfg, func(int) {})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(r, "", " ")
	t.Log(string(b))
}
