// Package packet parses Ethernet/IP/L4 frames without allocating and rewrites
// them in place for their backend (L2 DSR, IPIP, GUE).
package packet
