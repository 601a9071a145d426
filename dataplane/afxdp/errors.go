package afxdp

import "errors"

// Errors New and the socket's methods can return; test with errors.Is.
var (
	// ErrInvalidOpts: an option or argument is out of range; the message
	// names every offending field.
	ErrInvalidOpts = errors.New("afxdp: invalid options")
	// ErrUnsupported: the kernel lacks AF_XDP or a feature this package
	// needs (ring flags for need-wakeup, Linux >= 5.4).
	ErrUnsupported = errors.New("afxdp: not supported by this kernel")
	// ErrZeroCopyUnsupported: ZeroCopyOn was asked and the driver refused
	// a zero-copy bind.
	ErrZeroCopyUnsupported = errors.New("afxdp: zero-copy not supported by the driver")
	// ErrQueueBusy: another AF_XDP socket still holds the queue after
	// Opts.BindRetry of retries.
	ErrQueueBusy = errors.New("afxdp: queue busy")
	// ErrClosed: the socket is closed.
	ErrClosed = errors.New("afxdp: socket closed")
)
