package admin

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// The audit trail: every state-changing request on the socket (drain,
// undrain, node drain, reload and its dry run, capture) is logged once, when its answer is
// complete, with who asked (the peer's uid, gid and pid from SO_PEERCRED),
// what (the action, its target, the query's parameters) and the outcome;
// Info when it was done, Warn when it was refused or failed. A peer the
// socket refuses is logged too, whatever it asked. Read-only requests are
// not logged.
//
// Fields of an audit line (msg AuditMessage):
//
//	action      the endpoint: drain, undrain, drain-node, undrain-node, reload, reload-dry-run, capture
//	target      what it acts on, where it names one (drain, undrain: the backend as asked)
//	params      the query's parameters, as sent (absent without any)
//	outcome     ok, refused (the answer is 4xx: a bad parameter, an unknown backend, a reload refused,
//	            a capture already running, a peer not allowed) or failed (5xx, or a capture that ended in an error)
//	status      the HTTP status answered
//	error       why, when refused or failed
//	peer_uid, peer_gid, peer_pid  the process that connected (absent when SO_PEERCRED could not be read)
//
// and what the endpoint adds (drain: the backends it acted on; reload and
// reload-dry-run: the changes, applied or that would be; capture:
// frames, lost, duration).
const AuditMessage = "admin operation"

// Outcomes of an audit line.
const (
	OutcomeOK      = "ok"
	OutcomeRefused = "refused"
	OutcomeFailed  = "failed"
)

// maxAuditError bounds the error text an audit line keeps of an answer.
const maxAuditError = 512

// auditLog writes the audit lines.
type auditLog struct{ log *zap.Logger }

// audited serves op and logs one audit line when it has answered.
func (a *auditLog) audited(op operation) http.HandlerFunc {
	action := strings.TrimPrefix(op.path, "/")
	return func(w http.ResponseWriter, req *http.Request) {
		e := &auditEntry{}
		aw := &auditWriter{ResponseWriter: w}
		start := time.Now()
		op.handle(aw, req.WithContext(context.WithValue(req.Context(), auditKey{}, e)))
		status := aw.status
		if status == 0 {
			status = http.StatusOK
		}
		errText := e.err
		if errText == "" && status >= 400 {
			errText = strings.TrimSpace(string(aw.body))
		}
		outcome := OutcomeOK
		switch {
		case status >= 500 || status < 400 && errText != "":
			outcome = OutcomeFailed
		case status >= 400:
			outcome = OutcomeRefused
		}
		fields := append(make([]zap.Field, 0, 12+len(e.fields)), zap.String("action", action))
		if e.target != "" {
			fields = append(fields, zap.String("target", e.target))
		}
		fields = append(fields, params(req.URL.Query()))
		fields = append(fields, e.fields...)
		if e.timed {
			fields = append(fields, zap.Duration("duration", time.Since(start)))
		}
		a.write(outcome, status, errText, peerOf(req), fields)
	}
}

// refused logs a request the socket refused before any endpoint saw it
// (a peer not allowed).
func (a *auditLog) refused(req *http.Request, p peer, status int, why string) {
	action := strings.TrimPrefix(req.URL.Path, "/")
	a.write(OutcomeRefused, status, why, p, []zap.Field{zap.String("action", action), zap.String("method", req.Method), params(req.URL.Query())})
}

func (a *auditLog) write(outcome string, status int, errText string, p peer, fields []zap.Field) {
	fields = append(fields, zap.String("outcome", outcome), zap.Int("status", status))
	if errText != "" {
		fields = append(fields, zap.String("error", errText))
	}
	if p.known {
		fields = append(fields, zap.Uint32("peer_uid", p.uid), zap.Uint32("peer_gid", p.gid), zap.Int32("peer_pid", p.pid))
	}
	if outcome == OutcomeOK {
		a.log.Info(AuditMessage, fields...)
	} else {
		a.log.Warn(AuditMessage, fields...)
	}
}

type auditKey struct{}

// auditEntry is what a handler adds to its request's audit line.
type auditEntry struct {
	target string
	fields []zap.Field
	err    string // a failure the status does not show (a capture's, in a trailer)
	timed  bool
}

// auditOf is req's audit entry; a request not audited (a test calling a
// handler directly) gets one that is dropped.
func auditOf(req *http.Request) *auditEntry {
	if e, ok := req.Context().Value(auditKey{}).(*auditEntry); ok {
		return e
	}
	return &auditEntry{}
}

// auditTarget names what the request acts on.
func auditTarget(req *http.Request, target string) { auditOf(req).target = target }

// auditNote adds fields to the request's audit line.
func auditNote(req *http.Request, fields ...zap.Field) {
	e := auditOf(req)
	e.fields = append(e.fields, fields...)
}

// auditFailed records a failure after the answer began (its status is
// 200 already); an error that is the client's going away is none.
func auditFailed(req *http.Request, err error) {
	if err == nil || errors.Is(req.Context().Err(), context.Canceled) {
		return
	}
	auditOf(req).err = err.Error()
}

// auditTimed adds the request's duration to its audit line.
func auditTimed(req *http.Request) { auditOf(req).timed = true }

// auditWriter keeps the status answered and the start of an error's body.
// Unwrap lets http.NewResponseController reach the connection's
// (deadlines, Flush).
type auditWriter struct {
	http.ResponseWriter
	status int
	body   []byte
}

func (w *auditWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *auditWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.status >= 400 && len(w.body) < maxAuditError {
		w.body = append(w.body, p[:min(len(p), maxAuditError-len(w.body))]...)
	}
	return w.ResponseWriter.Write(p)
}

func (w *auditWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// params is the query as a field: an object, each parameter's value (its
// values, when sent more than once), the keys sorted.
func params(q url.Values) zap.Field {
	if len(q) == 0 {
		return zap.Skip()
	}
	return zap.Object("params", queryParams(q))
}

type queryParams url.Values

func (q queryParams) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if v := q[k]; len(v) == 1 {
			enc.AddString(k, v[0])
		} else if err := enc.AddArray(k, zapcore.ArrayMarshalerFunc(func(ae zapcore.ArrayEncoder) error {
			for _, s := range v {
				ae.AppendString(s)
			}
			return nil
		})); err != nil {
			return err
		}
	}
	return nil
}
