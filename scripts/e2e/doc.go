// Package e2e holds the end-to-end tests of xlb: the built `xlb run` binary
// attached to the balancer's veth of the namespace test bed
// (scripts/testbed), with real kernel TCP and UDP from a client namespace
// to the VIPs and real servers in the backend namespaces answering
// directly. They need root, like the bed; the package has no code of its
// own outside its tests.
package e2e
