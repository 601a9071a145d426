// Package healthcheck probes backends on the kernel's network stack and says
// which are healthy and what weight each reports (SPEC W1, W1a, W1b).
//
// A Checker keeps one schedule of every Target's next probe (a heap, read by
// one goroutine) and two lanes of workers that probe, so a target costs a
// heap entry rather than a goroutine and tens of thousands keep their
// interval. A target not known to answer (never probed, or its last probe
// failed) is probed in the failing lane (MaxConcurrentFailing workers), one
// whose last probe passed in the passing lane (MaxConcurrent): a dead
// endpoint's probe lasts its whole timeout, and hundreds of them would
// otherwise hold every worker while the backends that answer wait their
// turn. Each target waits a deterministic share of its interval (a hash
// of the target's key) before its first probe, so a thousand backends
// configured at once are not probed at once, then is probed once per
// interval, on the points of its schedule; a probe that starts late (every
// worker busy) does not move the later ones. Each probe has its own
// deadline (the check's timeout) from context.WithTimeout.
//
// Probes: an HTTP check sends GET request_path on a fresh connection (no
// keep-alive: a health check must open a connection as a client would), with
// the Host header of the check or, by default, the backend's address. It
// passes on status 200 (redirects are not followed: a 302 fails) and, when
// the check has a response prefix, a body that starts with it; at most that
// many body bytes are read. A TCP check passes when the connection opens
// (and, with a response prefix, when the first bytes the backend sends start
// with it).
//
// Weights (HTTP only; TCP checks report none): a 200 reply's
// X-Load-Balancing-Endpoint-Weight header, a decimal integer 0..1000, is a
// VALID weight; no such header is MISSING_WEIGHT; anything else (a sign, a
// fraction, a value over 1000, the header given twice) is INVALID_WEIGHT.
// Whitespace around the value is not part of it: HTTP header parsing strips
// it (RFC 9110 §5.5), so " 7 " is 7. A probe that got no 200 reply (timeout,
// refused, reset, another status) is UNAVAILABLE_WEIGHT, which keeps the
// last valid weight (0 if there never was one). Weights are not subject to
// the thresholds: each reply's report counts.
//
// Health follows the thresholds: a target starts unhealthy (it never
// answered) and becomes healthy after healthy_threshold consecutive passes;
// a healthy one becomes unhealthy after unhealthy_threshold consecutive
// failures. Every change is logged once with the probe's reason.
//
// Results reach the caller in batches through Options.Notify, one call per
// burst of probes that finish close together, so a consumer can apply a
// round of results as one change.
package healthcheck
