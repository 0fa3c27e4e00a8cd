// Package prefix owns the tenant-scoped prefix cache: which page-aligned
// blocks of earlier prompts are kept, under which namespace, and when they
// are evicted.
//
// A block is one kv page of tokens. Its Key is SHA-256 over domain-tagged,
// length-prefixed fields (namespace, parent key, block tokens), so a key
// names a whole prefix within one namespace. The cache holds each block as
// a shared, read-only kv page through a kv.PageRef hold; a sequence that
// hits attaches the pages with kv.Pool.AllocWithPrefix, and every read of
// them is still tag-checked against the cache entry's owner tag.
//
// The namespace is supplied by the engine from the authenticated tenant
// (see Namespace); it is never read from a request. Tenants share cached
// prefixes only when operator configuration maps them to one group.
//
// Each namespace has its own block quota and LRU order; eviction takes
// leaves first, so a cached block always has its whole prefix cached.
// When the pool runs short, Reclaim takes blocks from the namespace that
// holds the most, so one tenant's load cannot flush another's cache.
//
// What prefix must never do:
//   - return a page cached under one namespace to a lookup in another, or
//     cache a page that belongs to another namespace;
//   - hash a namespace, parent or token list ambiguously;
//   - cache a partial block (a page a sequence may still write);
//   - free a page itself: it only drops its hold, and kv frees the page
//     when no sequence attaches it any more.
//
// It starts no goroutines and reads no clock: recency is a logical counter.
package prefix
