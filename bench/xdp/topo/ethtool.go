package topo

import "xlb/internal/ethtool"

// prepareVeth sets dev's offloads for the bench: segmentation and transmit
// checksum offloads off, so every frame on the wire is complete and fits
// the MTU as on a real link (a veth otherwise hands its peer partial
// checksums, which an XDP program would forward as they are); GRO on,
// which gives a veth its NAPI instance without an XDP program, so NAPI can
// run threaded (see Topo.Threaded). dev is in the calling thread's
// namespace.
func prepareVeth(dev string) error {
	s, err := ethtool.Open()
	if err != nil {
		return err
	}
	defer s.Close()
	for _, f := range []struct {
		o  ethtool.Offload
		on bool
	}{
		{ethtool.GSO, false},
		{ethtool.TSO, false},
		{ethtool.SG, false},
		{ethtool.TxChecksum, false},
		{ethtool.GRO, true},
	} {
		if err := s.SetOffload(dev, f.o, f.on); err != nil {
			return err
		}
	}
	return nil
}
