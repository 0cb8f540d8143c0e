package placement

import (
	"crypto/rand"
	"encoding/binary"
	"math/bits"
)

// SessionHasher turns a raw session id into the keyed 64-bit hash that is the
// only form of it the warden keeps: SipHash-2-4 (Aumasson and Bernstein),
// a keyed PRF built for exactly this (short inputs, hash-flooding resistance,
// no recovery of the input without the key). The key is 16 bytes: from the
// config's hash_key when set (hashes then stay the same across restarts, so
// a pinned BPF map survives an agent restart), else random per process.
type SessionHasher struct{ k0, k1 uint64 }

// NewSessionHasher uses key (16 bytes) or, when key is nil, a random key.
func NewSessionHasher(key []byte) SessionHasher {
	if len(key) != 16 {
		key = make([]byte, 16)
		if _, err := rand.Read(key); err != nil {
			panic("agent: no randomness for the session hash key: " + err.Error())
		}
	}
	return SessionHasher{binary.LittleEndian.Uint64(key[:8]), binary.LittleEndian.Uint64(key[8:])}
}

// Hash is SipHash-2-4 of id. It never returns 0, which the session table
// reserves for "no session".
func (h SessionHasher) Hash(id string) uint64 {
	v0 := h.k0 ^ 0x736f6d6570736575
	v1 := h.k1 ^ 0x646f72616e646f6d
	v2 := h.k0 ^ 0x6c7967656e657261
	v3 := h.k1 ^ 0x7465646279746573
	n := len(id)
	for len(id) >= 8 {
		m := uint64(id[0]) | uint64(id[1])<<8 | uint64(id[2])<<16 | uint64(id[3])<<24 |
			uint64(id[4])<<32 | uint64(id[5])<<40 | uint64(id[6])<<48 | uint64(id[7])<<56
		v3 ^= m
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0 ^= m
		id = id[8:]
	}
	last := uint64(n) << 56
	for i := len(id) - 1; i >= 0; i-- {
		last |= uint64(id[i]) << (8 * uint(i))
	}
	v3 ^= last
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0 ^= last
	v2 ^= 0xff
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	sum := v0 ^ v1 ^ v2 ^ v3
	if sum == 0 {
		sum = 1
	}
	return sum
}

func sipRound(v0, v1, v2, v3 uint64) (uint64, uint64, uint64, uint64) {
	v0 += v1
	v1 = bits.RotateLeft64(v1, 13)
	v1 ^= v0
	v0 = bits.RotateLeft64(v0, 32)
	v2 += v3
	v3 = bits.RotateLeft64(v3, 16)
	v3 ^= v2
	v0 += v3
	v3 = bits.RotateLeft64(v3, 21)
	v3 ^= v0
	v2 += v1
	v1 = bits.RotateLeft64(v1, 17)
	v1 ^= v2
	v2 = bits.RotateLeft64(v2, 32)
	return v0, v1, v2, v3
}
