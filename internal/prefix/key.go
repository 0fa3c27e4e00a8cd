package prefix

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// Key identifies one cached block: SHA-256 over the namespace, the parent
// block's key and the block's tokens. Because the parent is in the hash, a
// key names the whole prefix up to and including its block, and because
// the namespace is in every block's hash, two namespaces never share a key.
type Key [32]byte

func (k Key) String() string { return hex.EncodeToString(k[:8]) }

// Field tags. Every field is written as tag, length, bytes, so no choice of
// namespace or tokens can make two different field lists hash the same
// byte string.
const (
	domain      = "bulkhead/prefix/block/v1"
	fieldNS     = 1
	fieldParent = 2
	fieldTokens = 3
)

// BlockKey returns the key of the block of tokens that follows parent in
// namespace ns. The first block of a prompt has the zero Key as parent.
func BlockKey(ns string, parent Key, tokens []int) Key {
	h := sha256.New()
	var buf [9]byte
	field := func(tag byte, n int) {
		buf[0] = tag
		binary.BigEndian.PutUint64(buf[1:], uint64(n))
		h.Write(buf[:])
	}
	field(0, len(domain))
	h.Write([]byte(domain))
	field(fieldNS, len(ns))
	h.Write([]byte(ns))
	field(fieldParent, len(parent))
	h.Write(parent[:])
	field(fieldTokens, len(tokens))
	tok := make([]byte, 8*len(tokens))
	for i, t := range tokens {
		binary.BigEndian.PutUint64(tok[8*i:], uint64(int64(t)))
	}
	h.Write(tok)
	var k Key
	h.Sum(k[:0])
	return k
}

// Namespace returns the cache namespace of an authenticated tenant: its
// own, unless groups (operator configuration, tenant → group) puts it in a
// group whose members deliberately share cached prefixes. The tenant must
// come from authentication, never from a request body; the prefixes keep
// tenant and group names from colliding.
//
// An empty tenant gets the empty namespace, which the cache refuses, so a
// forgotten tenant can never land in a shared namespace.
func Namespace(tenant string, groups map[string]string) string {
	if tenant == "" {
		return ""
	}
	if g, ok := groups[tenant]; ok && g != "" {
		return "group:" + g
	}
	return "tenant:" + tenant
}
