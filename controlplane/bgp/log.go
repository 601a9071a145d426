package bgp

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"

	"github.com/osrg/gobgp/v3/pkg/log"
	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// gobgpLogger passes GoBGP's log to zap, at debug level (errors at error
// level: GoBGP's warnings are mostly sessions failing, which the speaker
// logs itself once per change), and hands the lines that say why a
// session failed to hook.
type gobgpLogger struct {
	z    *zap.Logger
	hook func(neighbor netip.Addr, reason string)
}

func (l *gobgpLogger) Panic(msg string, f log.Fields) { l.write(zapcore.ErrorLevel, msg, f) }
func (l *gobgpLogger) Fatal(msg string, f log.Fields) { l.write(zapcore.ErrorLevel, msg, f) }
func (l *gobgpLogger) Error(msg string, f log.Fields) { l.write(zapcore.ErrorLevel, msg, f) }
func (l *gobgpLogger) Warn(msg string, f log.Fields)  { l.write(zapcore.DebugLevel, msg, f) }
func (l *gobgpLogger) Info(msg string, f log.Fields)  { l.write(zapcore.DebugLevel, msg, f) }
func (l *gobgpLogger) Debug(msg string, f log.Fields) { l.write(zapcore.DebugLevel, msg, f) }

// SetLevel is ignored: zap's level rules.
func (l *gobgpLogger) SetLevel(log.LogLevel) {}

// GetLevel is always debug: GoBGP builds its "failed to connect" line, the
// only account of a refused or unanswered dial, only at that level.
func (l *gobgpLogger) GetLevel() log.LogLevel { return log.DebugLevel }

func (l *gobgpLogger) write(lvl zapcore.Level, msg string, f log.Fields) {
	if r := sessionReason(msg, f); r != "" {
		if a, ok := fieldAddr(f); ok {
			l.hook(a, r)
		}
	}
	if ce := l.z.Check(lvl, msg); ce != nil {
		fields := make([]zap.Field, 0, len(f))
		for _, k := range slices.Sorted(maps.Keys(f)) {
			fields = append(fields, zap.Any(k, f[k]))
		}
		ce.Write(fields...)
	}
}

// fieldAddr is the neighbor a line of GoBGP is about ("Key").
func fieldAddr(f log.Fields) (netip.Addr, bool) {
	if f["Topic"] != "Peer" {
		return netip.Addr{}, false
	}
	s, _ := f["Key"].(string)
	a, err := netip.ParseAddr(s)
	return a.Unmap(), err == nil
}

// sessionReason is why a session failed, from one line of GoBGP's log; ""
// when the line says no such thing. The text must not vary between
// attempts that fail alike: it is logged once per change.
func sessionReason(msg string, f log.Fields) string {
	switch msg {
	case "failed to connect":
		err, _ := f["Error"].(error)
		var op *net.OpError
		if errors.As(err, &op) && op.Err != nil {
			err = op.Err // without the addresses and ephemeral port
		}
		if err == nil {
			return "connect failed"
		}
		return "connect: " + err.Error()
	case "sent notification", "received notification":
		verb := "sent"
		if msg == "received notification" {
			verb = "received"
		}
		if e, ok := f["Data"].(*bgp.MessageError); ok {
			return fmt.Sprintf("%s notification: %s (%s)", verb, bgp.NewNotificationErrorCode(e.TypeCode, e.SubTypeCode), e.Message)
		}
		code, ok1 := f["Code"].(uint8)
		sub, ok2 := f["Subcode"].(uint8)
		if ok1 && ok2 {
			return fmt.Sprintf("%s notification: %s", verb, bgp.NewNotificationErrorCode(code, sub))
		}
		return verb + " notification"
	case "Peer Down":
		if r, ok := f["Reason"].(string); ok {
			return r
		}
		return "peer down"
	case "hold timer expired":
		return "hold timer expired"
	}
	return ""
}
