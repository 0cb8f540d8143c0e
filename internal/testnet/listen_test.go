package testnet

import (
	"io"
	"testing"
)

func TestListenAndDialCarryBytes(t *testing.T) {
	ln := Listen(t, "127.0.0.1:0")
	c := Dial(t, ln.Addr().String())
	a, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(a, got); err != nil || string(got) != "ping" {
		t.Fatalf("read %q, %v; want ping", got, err)
	}
}
