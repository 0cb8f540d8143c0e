package placement

import (
	"bytes"
	"strings"
	"testing"
)

// sipHash24Vectors are the published SipHash-2-4 test vectors (64-bit
// output) of the reference implementation by Aumasson and Bernstein
// (vectors.h, vectors_sip64): key 00 01 02 ... 0f, and for vector i the
// message of i bytes 00 01 02 ... (i-1), the output read as a
// little-endian uint64. The first one, of the empty message, is the
// paper's 0x726fdb47dd0e0e31.
var sipHash24Vectors = [64]uint64{
	0x726fdb47dd0e0e31, // 0 bytes
	0x74f839c593dc67fd, // 1 bytes
	0x0d6c8009d9a94f5a, // 2 bytes
	0x85676696d7fb7e2d, // 3 bytes
	0xcf2794e0277187b7, // 4 bytes
	0x18765564cd99a68d, // 5 bytes
	0xcbc9466e58fee3ce, // 6 bytes
	0xab0200f58b01d137, // 7 bytes
	0x93f5f5799a932462, // 8 bytes
	0x9e0082df0ba9e4b0, // 9 bytes
	0x7a5dbbc594ddb9f3, // 10 bytes
	0xf4b32f46226bada7, // 11 bytes
	0x751e8fbc860ee5fb, // 12 bytes
	0x14ea5627c0843d90, // 13 bytes
	0xf723ca908e7af2ee, // 14 bytes
	0xa129ca6149be45e5, // 15 bytes
	0x3f2acc7f57c29bdb, // 16 bytes
	0x699ae9f52cbe4794, // 17 bytes
	0x4bc1b3f0968dd39c, // 18 bytes
	0xbb6dc91da77961bd, // 19 bytes
	0xbed65cf21aa2ee98, // 20 bytes
	0xd0f2cbb02e3b67c7, // 21 bytes
	0x93536795e3a33e88, // 22 bytes
	0xa80c038ccd5ccec8, // 23 bytes
	0xb8ad50c6f649af94, // 24 bytes
	0xbce192de8a85b8ea, // 25 bytes
	0x17d835b85bbb15f3, // 26 bytes
	0x2f2e6163076bcfad, // 27 bytes
	0xde4daaaca71dc9a5, // 28 bytes
	0xa6a2506687956571, // 29 bytes
	0xad87a3535c49ef28, // 30 bytes
	0x32d892fad841c342, // 31 bytes
	0x7127512f72f27cce, // 32 bytes
	0xa7f32346f95978e3, // 33 bytes
	0x12e0b01abb051238, // 34 bytes
	0x15e034d40fa197ae, // 35 bytes
	0x314dffbe0815a3b4, // 36 bytes
	0x027990f029623981, // 37 bytes
	0xcadcd4e59ef40c4d, // 38 bytes
	0x9abfd8766a33735c, // 39 bytes
	0x0e3ea96b5304a7d0, // 40 bytes
	0xad0c42d6fc585992, // 41 bytes
	0x187306c89bc215a9, // 42 bytes
	0xd4a60abcf3792b95, // 43 bytes
	0xf935451de4f21df2, // 44 bytes
	0xa9538f0419755787, // 45 bytes
	0xdb9acddff56ca510, // 46 bytes
	0xd06c98cd5c0975eb, // 47 bytes
	0xe612a3cb9ecba951, // 48 bytes
	0xc766e62cfcadaf96, // 49 bytes
	0xee64435a9752fe72, // 50 bytes
	0xa192d576b245165a, // 51 bytes
	0x0a8787bf8ecb74b2, // 52 bytes
	0x81b3e73d20b49b6f, // 53 bytes
	0x7fa8220ba3b2ecea, // 54 bytes
	0x245731c13ca42499, // 55 bytes
	0xb78dbfaf3a8d83bd, // 56 bytes
	0xea1ad565322a1a0b, // 57 bytes
	0x60e61c23a3795013, // 58 bytes
	0x6606d7e446282b93, // 59 bytes
	0x6ca4ecb15c5f91e1, // 60 bytes
	0x9f626da15c9625f3, // 61 bytes
	0xe51b38608ef25f57, // 62 bytes
	0x958a324ceb064572, // 63 bytes
}

func TestSessionHasherMatchesTheSipHash24ReferenceVectors(t *testing.T) {
	key := make([]byte, 16)
	for i := range key {
		key[i] = byte(i)
	}
	h := NewSessionHasher(key)
	msg := make([]byte, 0, 64)
	for i, want := range sipHash24Vectors {
		if got := h.Hash(string(msg)); got != want {
			t.Errorf("%d-byte message: SipHash-2-4 = %#016x, want %#016x", i, got, want)
		}
		msg = append(msg, byte(i))
	}
}

func TestSessionHashDependsOnTheKey(t *testing.T) {
	id := strings.Repeat("7d0c6e0e-3b52-4f5f-9c1a-", 2)
	a := NewSessionHasher(bytes.Repeat([]byte{1}, 16)).Hash(id)
	b := NewSessionHasher(bytes.Repeat([]byte{2}, 16)).Hash(id)
	if a == b {
		t.Fatalf("two keys gave the same hash %#x", a)
	}
	if a != NewSessionHasher(bytes.Repeat([]byte{1}, 16)).Hash(id) {
		t.Fatal("one key, two hashes")
	}
}
