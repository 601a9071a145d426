package flowsync

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"sync"
)

// hkdfInfo binds derived keys to this protocol and version.
const hkdfInfo = "xlb flow sync v1"

// maxCachedAEADs bounds the per-sender AEADs a keyring keeps: far more than
// a fleet's instances (and their restarts, each a new sender ID), small
// enough to be nothing. Only a sender whose message opened is cached, so
// nobody without the key can fill it.
const maxCachedAEADs = 256

var errKeys = errors.New("flowsync: one or two keys are needed")

// keyID is how a message names the key it is sealed with: the first 4
// bytes of SHA-256(key).
func keyID(k *[32]byte) [4]byte {
	s := sha256.Sum256(k[:])
	return [4]byte(s[:4])
}

// deriveAEAD is sender's AES-256-GCM under key k.
func deriveAEAD(k *[32]byte, sender uint64) cipher.AEAD {
	var salt [8]byte
	binary.BigEndian.PutUint64(salt[:], sender)
	dk, err := hkdf.Key(sha256.New, k[:], salt[:], hkdfInfo, 32)
	if err != nil {
		panic(err) // only for lengths HKDF-SHA256 cannot produce
	}
	b, err := aes.NewCipher(dk)
	if err != nil {
		panic(err)
	}
	a, err := cipher.NewGCM(b)
	if err != nil {
		panic(err)
	}
	return a
}

type cacheKey struct {
	key    int // index in keyring.keys
	sender uint64
}

// keyring is the configured keys (the first seals, each opens), their IDs
// and the AEADs derived from them. Safe for concurrent use.
type keyring struct {
	keys [][32]byte
	ids  [][4]byte
	// seal is this process's own AEAD under keys[0].
	seal cipher.AEAD

	mu    sync.Mutex
	cache map[cacheKey]cipher.AEAD
}

func newKeyring(keys [][32]byte, self uint64) (*keyring, error) {
	if len(keys) < 1 || len(keys) > 2 {
		return nil, errKeys
	}
	r := &keyring{keys: append([][32]byte(nil), keys...), cache: map[cacheKey]cipher.AEAD{}}
	for i := range r.keys {
		r.ids = append(r.ids, keyID(&r.keys[i]))
	}
	r.seal = deriveAEAD(&r.keys[0], self)
	return r, nil
}

// sealID is the ID of the key that seals.
func (r *keyring) sealID() [4]byte { return r.ids[0] }

// index is the key with that ID, or -1.
func (r *keyring) index(id [4]byte) int {
	for i := range r.ids {
		if r.ids[i] == id {
			return i
		}
	}
	return -1
}

// open authenticates and decrypts msg (header h) from sender h.sender,
// with associated data extra after the header; false: no key with its ID,
// or it does not open. A sender's AEAD is derived once per key while
// cached, and cached only once a message of it opened.
func (r *keyring) open(sc *scratch, h *header, msg, extra []byte) ([]byte, bool) {
	i := r.index(h.keyID)
	if i < 0 {
		return nil, false
	}
	ck := cacheKey{i, h.sender}
	r.mu.Lock()
	a := r.cache[ck]
	r.mu.Unlock()
	if a != nil {
		return sc.open(a, h, msg, extra)
	}
	a = deriveAEAD(&r.keys[i], h.sender)
	body, ok := sc.open(a, h, msg, extra)
	if !ok {
		return nil, false
	}
	r.mu.Lock()
	if len(r.cache) >= maxCachedAEADs {
		for k := range r.cache { // any one: a live sender is derived again
			delete(r.cache, k)
			break
		}
	}
	r.cache[ck] = a
	r.mu.Unlock()
	return body, true
}

// carryCache moves the cached AEADs of the keys old and r share into r, so
// that a reload does not derive again for every peer.
func (r *keyring) carryCache(old *keyring) {
	if old == nil {
		return
	}
	old.mu.Lock()
	defer old.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	for ck, a := range old.cache {
		if j := r.index(old.ids[ck.key]); j >= 0 && r.keys[j] == old.keys[ck.key] {
			r.cache[cacheKey{j, ck.sender}] = a
		}
	}
}
