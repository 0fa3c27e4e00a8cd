package peerauth

import (
	"context"
	"strings"
	"testing"
)

// TestKeyIdentityIsTheOwnersKey: each end of a connection sees the other's
// Identity, the one the other computes for itself: what lets the router
// name, from its control connection to a prefill server, the identity
// decode will see on that server's KV connection. Under psk two processes
// (two NewPSK calls, different certificates) have the same identity: the
// key is all there is to tell peers apart, and it is shared.
func TestKeyIdentityIsTheOwnersKey(t *testing.T) {
	ps, err := MakeCerts(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	pre, err := Load(ps[RolePrefill])
	if err != nil {
		t.Fatal(err)
	}
	dec, err := Load(ps[RoleDecode])
	if err != nil {
		t.Fatal(err)
	}
	if pre.Identity() == dec.Identity() {
		t.Fatal("two mtls certificates with their own keys have the same identity")
	}
	ln, err := dec.Listen("tcp", "127.0.0.1:0", RolePrefill)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	seen := make(chan [32]byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			seen <- [32]byte{}
			return
		}
		defer c.Close()
		Handshake(context.Background(), c)
		id, _ := ConnKeyIdentity(c)
		seen <- id
	}()
	c, err := pre.Dial(context.Background(), ln.Addr().String(), RoleDecode)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, ok := ConnKeyIdentity(c); !ok || got != dec.Identity() {
		t.Fatalf("prefill sees decode as %x (%v), decode's own identity is %x", got, ok, dec.Identity())
	}
	if got := <-seen; got != pre.Identity() {
		t.Fatalf("decode sees prefill as %x, prefill's own identity is %x", got, pre.Identity())
	}

	key := []byte(strings.Repeat("k", MinPSKBytes))
	a, err := NewPSK(key)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewPSK(key)
	if err != nil {
		t.Fatal(err)
	}
	if a.Identity() != b.Identity() {
		t.Fatal("two psk processes have different identities; psk derives one key for all")
	}
	if _, ok := KeyIdentity(nil); ok {
		t.Fatal("an identity from no connection state")
	}
}
