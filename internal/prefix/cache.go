package prefix

import (
	"container/list"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/bulkhead-llm/bulkhead/internal/kv"
)

// ErrNamespace: an empty namespace, or a page that belongs to another
// namespace than the one it is being cached under.
var ErrNamespace = errors.New("prefix cache namespace error")

// Config bounds the cache.
type Config struct {
	// MaxBlocks is how many blocks one namespace may keep cached. Zero
	// means a quarter of the pool's pages.
	MaxBlocks int
	// NamespaceBlocks overrides MaxBlocks per namespace; 0 turns caching
	// off for that namespace.
	NamespaceBlocks map[string]int
}

// node is one cached block. It holds one kv reference on its page.
type node struct {
	key      Key
	ns       *space
	parent   *node
	children int
	ref      kv.PageRef
	elem     *list.Element // in ns.lru; front is most recently used
	stamp    uint64        // logical time of last use, for Reclaim across namespaces
}

// space is one namespace's share of the cache.
type space struct {
	name          string
	limit, blocks int
	lru           list.List
	hits, misses  uint64
}

// Cache is a tenant-scoped radix cache of prefix blocks over a kv.Pool. A
// block is PageSize tokens, and the cache holds it as a shared, read-only
// kv page. Blocks form a tree through their keys' parent hashes; a lookup
// walks it from the root and stops at the first miss.
//
// All methods are safe for concurrent use (one mutex), though the engine
// is expected to call them from its step goroutine.
type Cache struct {
	mu     sync.Mutex
	pool   *kv.Pool
	bs     int
	cfg    Config
	nodes  map[Key]*node
	spaces map[string]*space
	clock  uint64
	nextID uint64 // request ids of the cache entries' page owners
	// gen moves whenever a block is added or removed; with the pool's
	// HoldGen it tells when count, Reclaimable's last answer, still holds.
	gen   uint64
	count reclaimCount

	inserted, evicted, releaseErrs uint64
}

// New returns an empty cache over pool, with blocks of the pool's page size.
func New(pool *kv.Pool, cfg Config) (*Cache, error) {
	pages, ps := pool.Capacity()
	if cfg.MaxBlocks < 0 {
		return nil, fmt.Errorf("prefix cache: max blocks %d is negative", cfg.MaxBlocks)
	}
	if cfg.MaxBlocks == 0 {
		cfg.MaxBlocks = max(1, pages/4)
	}
	for ns, n := range cfg.NamespaceBlocks {
		if n < 0 {
			return nil, fmt.Errorf("prefix cache: namespace %q block limit %d is negative", ns, n)
		}
	}
	return &Cache{pool: pool, bs: ps, cfg: cfg, nodes: map[Key]*node{}, spaces: map[string]*space{}}, nil
}

// BlockSize is the number of tokens per cached block (the pool's page size).
func (c *Cache) BlockSize() int { return c.bs }

func (c *Cache) space(ns string) *space {
	s := c.spaces[ns]
	if s == nil {
		limit, ok := c.cfg.NamespaceBlocks[ns]
		if !ok {
			limit = c.cfg.MaxBlocks
		}
		s = &space{name: ns, limit: limit}
		c.spaces[ns] = s
	}
	return s
}

// touch marks path as just used, deepest block first, so that a parent is
// always more recent than its children and LRU order evicts leaves first.
func (c *Cache) touch(path []*node) {
	for i := len(path) - 1; i >= 0; i-- {
		n := path[i]
		c.clock++
		n.stamp = c.clock
		n.ns.lru.MoveToFront(n.elem)
	}
}

// Lookup returns the cached pages of the longest cached prefix of tokens
// in namespace ns, in order, and how many tokens they cover (a multiple of
// the block size). The refs stay owned by the cache: pass them to
// kv.Pool.AllocWithPrefix, which takes its own holds, before anything can
// evict them. An engine that needs logits for the prompt's last token
// should look up tokens[:len(tokens)-1], so that at least one token is
// left to compute.
func (c *Cache) Lookup(ns string, tokens []int) (hits []kv.PageRef, matchedTokens int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ns == "" {
		return nil, 0
	}
	sp := c.space(ns)
	var path []*node
	var h Key
	for i := 0; (i+1)*c.bs <= len(tokens); i++ {
		h = BlockKey(ns, h, tokens[i*c.bs:(i+1)*c.bs])
		n := c.nodes[h]
		if n == nil || n.ns != sp {
			break
		}
		path = append(path, n)
		hits = append(hits, n.ref)
	}
	if len(path) == 0 {
		sp.misses++
		return nil, 0
	}
	sp.hits++
	c.touch(path)
	return hits, len(path) * c.bs
}

// Insert caches the full blocks of tokens that s holds (positions written
// in every layer) under namespace ns, sharing s's pages read-only. Blocks
// already cached are only marked used. When ns is at its quota, its least
// recently used blocks are evicted to make room; Insert stops early when
// nothing else can go. It returns how many blocks it added.
//
// s must hold the KV of exactly these tokens from position 0; the cache
// cannot check that, the engine must.
func (c *Cache) Insert(ns string, tokens []int, s *kv.Seq) (added int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ns == "" {
		return 0, fmt.Errorf("%w: insert without a namespace", ErrNamespace)
	}
	sp := c.space(ns)
	blocks := min(len(tokens), s.Len()) / c.bs
	var path []*node
	var parent *node
	var h Key
	defer func() { c.touch(path) }()
	for i := range blocks {
		h = BlockKey(ns, h, tokens[i*c.bs:(i+1)*c.bs])
		if n := c.nodes[h]; n != nil {
			if n.ns != sp {
				return added, fmt.Errorf("%w: key %v of namespace %q is held by another namespace", ErrNamespace, h, ns)
			}
			path, parent = append(path, n), n
			continue
		}
		if sp.blocks >= sp.limit && !c.evictOne(sp, parent) {
			return added, nil
		}
		c.nextID++
		ref, err := s.SharePage(i, kv.Owner{Tenant: ns, Request: c.nextID})
		if err != nil {
			return added, fmt.Errorf("prefix cache: block %d of %d: %w", i, blocks, err)
		}
		if ref.Owner().Tenant != ns {
			// The sequence attached this page from another namespace's
			// cache; caching it here would hand it across namespaces.
			if rerr := c.pool.Release(ref); rerr != nil {
				c.releaseErrs++
			}
			return added, fmt.Errorf("%w: block %d of the sequence is a page of another namespace", ErrNamespace, i)
		}
		n := &node{key: h, ns: sp, parent: parent, ref: ref}
		n.elem = sp.lru.PushFront(n)
		c.nodes[h] = n
		c.gen++
		sp.blocks++
		if parent != nil {
			parent.children++
		}
		c.inserted++
		added++
		path, parent = append(path, n), n
	}
	return added, nil
}

// evictOne removes the least recently used leaf block of sp other than
// keep, and reports whether there was one.
func (c *Cache) evictOne(sp *space, keep *node) bool {
	if n := sp.oldestLeaf(keep); n != nil {
		c.remove(n)
		return true
	}
	return false
}

// oldestLeaf is sp's least recently used block with no cached children,
// other than keep, or nil if there is none. With keep nil, a namespace
// holding any block has one: its blocks form a forest.
func (sp *space) oldestLeaf(keep *node) *node {
	for e := sp.lru.Back(); e != nil; e = e.Prev() {
		if n := e.Value.(*node); n.children == 0 && n != keep {
			return n
		}
	}
	return nil
}

// oldestIdleLeaf is sp's least recently used leaf whose page only the
// cache holds and that kept does not name, or nil if there is none.
func (sp *space) oldestIdleLeaf(pool *kv.Pool, kept map[int]bool) *node {
	for e := sp.lru.Back(); e != nil; e = e.Prev() {
		if n := e.Value.(*node); n.children == 0 && !kept[n.ref.Page()] && pool.Idle(n.ref) {
			return n
		}
	}
	return nil
}

func (c *Cache) remove(n *node) {
	c.gen++
	delete(c.nodes, n.key)
	n.ns.lru.Remove(n.elem)
	n.ns.blocks--
	if n.parent != nil {
		n.parent.children--
	}
	if err := c.pool.Release(n.ref); err != nil {
		// The cache's own hold was already gone: a bug somewhere, counted
		// so tests and metrics see it.
		c.releaseErrs++
	}
	c.evicted++
}

// Evict removes up to blocks least recently used blocks of namespace ns,
// leaves first, releasing their pages, and returns how many it removed.
func (c *Cache) Evict(ns string, blocks int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	sp := c.spaces[ns]
	n := 0
	for sp != nil && n < blocks && c.evictOne(sp, nil) {
		n++
	}
	return n
}

// Reclaim removes up to blocks cached blocks, for when the pool runs short,
// and returns how many it removed. It removes only blocks whose page the
// cache alone holds (kv.Pool.Idle), so each one removed gives a page back
// to the pool at once; a block that a running sequence still attaches
// would give nothing back, and removing it would only cost its namespace
// the entry. It never removes the blocks of keep: the prefix the
// allocation it makes room for is about to attach, whose removal would
// only raise what that allocation needs. Each block comes from the
// namespace that holds the most blocks at that moment (of two holding as
// many, the one whose least recently used such leaf is older), and within
// it from the least recently used leaf.
//
// Largest first, not least recently used across namespaces, is for
// isolation: under a global LRU one tenant's burst of new prompts flushed
// every other tenant's cache, which the others then saw in their own time
// to first token. Now a tenant's pressure falls first on its own blocks,
// and another namespace loses blocks only while it holds at least as many
// as every other; a namespace's cached prefixes survive anyone else's
// load as long as it stays at or below its fair share.
func (c *Cache) Reclaim(blocks int, keep ...kv.PageRef) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	kept := keptPages(keep)
	n := 0
	for n < blocks {
		var victim *node
		for _, sp := range c.spaces {
			if sp.blocks == 0 || victim != nil && sp.blocks < victim.ns.blocks {
				continue
			}
			leaf := sp.oldestIdleLeaf(c.pool, kept)
			if leaf == nil {
				continue
			}
			if victim == nil || sp.blocks > victim.ns.blocks || leaf.stamp < victim.stamp {
				victim = leaf
			}
		}
		if victim == nil {
			break
		}
		c.remove(victim)
		n++
	}
	return n
}

// Reclaimable is how many blocks Reclaim(_, keep...) could remove now,
// each giving a page back to the pool: those whose page the cache alone
// holds, not in keep, with no cached descendant that anything else holds
// or keep names (a leaf only once its children are gone). A caller short
// of n pages reclaims only when this is at least n: removing fewer would
// empty caches and still not fit.
//
// While a queue waits for pages that running sequences hold, the scheduler
// asks this at every step. The answer is kept, and given again without a
// walk over every block as long as no block was added or removed, no page
// gained or lost a hold (kv.Pool.HoldGen) and keep is the same.
func (c *Cache) Reclaimable(keep ...kv.PageRef) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := &c.count; m.valid && m.gen == c.gen && slices.Equal(m.keep, keep) && m.holdGen == c.pool.HoldGen() {
		return m.n
	}
	n, holdGen := c.reclaimable(keep)
	c.count = reclaimCount{valid: true, gen: c.gen, holdGen: holdGen, keep: append(c.count.keep[:0], keep...), n: n}
	return n
}

// reclaimCount is an answer of Reclaimable and the state it holds for.
type reclaimCount struct {
	valid        bool
	gen, holdGen uint64
	keep         []kv.PageRef
	n            int
}

// reclaimable counts what Reclaimable answers by walking every block, and
// returns the pool's HoldGen that the count holds at.
func (c *Cache) reclaimable(keep []kv.PageRef) (int, uint64) {
	kept := keptPages(keep)
	nodes := make([]*node, 0, len(c.nodes))
	refs := make([]kv.PageRef, 0, len(c.nodes))
	for _, n := range c.nodes {
		nodes, refs = append(nodes, n), append(refs, n.ref)
	}
	idle := make([]bool, len(refs))
	holdGen := c.pool.IdleEach(refs, idle)
	blocked := map[*node]bool{}
	for i, n := range nodes {
		if idle[i] && !kept[n.ref.Page()] {
			continue
		}
		idle[i] = false
		for a := n.parent; a != nil && !blocked[a]; a = a.parent {
			blocked[a] = true
		}
	}
	k := 0
	for i, n := range nodes {
		if idle[i] && !blocked[n] {
			k++
		}
	}
	return k, holdGen
}

// keptPages is the set of pages keep names.
func keptPages(keep []kv.PageRef) map[int]bool {
	if len(keep) == 0 {
		return nil
	}
	kept := make(map[int]bool, len(keep))
	for _, r := range keep {
		kept[r.Page()] = true
	}
	return kept
}

// Clear evicts everything.
func (c *Cache) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, sp := range c.spaces {
		for c.evictOne(sp, nil) {
		}
	}
}

// Stats is a snapshot of the cache.
type Stats struct {
	Hits, Misses      uint64 // lookups that matched at least one block, and those that matched none
	Inserted, Evicted uint64 // blocks
	Blocks            map[string]int
	NamespaceHits     map[string]uint64
	// ReleaseErrors counts cache holds the pool no longer recognised. It
	// must stay zero.
	ReleaseErrors uint64
}

// Stats returns a snapshot.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Stats{Inserted: c.inserted, Evicted: c.evicted, ReleaseErrors: c.releaseErrs,
		Blocks: map[string]int{}, NamespaceHits: map[string]uint64{}}
	for name, sp := range c.spaces {
		st.Hits += sp.hits
		st.Misses += sp.misses
		if sp.blocks > 0 {
			st.Blocks[name] = sp.blocks
		}
		if sp.hits > 0 {
			st.NamespaceHits[name] = sp.hits
		}
	}
	return st
}
