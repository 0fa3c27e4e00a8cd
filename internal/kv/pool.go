package kv

import (
	"fmt"
	"math"
	"sort"
	"sync"

	"github.com/bulkhead-llm/bulkhead/internal/model"
)

// PoolConfig sizes a pool. Pages × PageSize is the pool's token capacity.
type PoolConfig struct {
	Pages    int // number of pages
	PageSize int // tokens per page
	Layers   int // transformer layers (model.Config.Layers)
	KVDim    int // elements per token per layer, for K and again for V (model.Config.KVDim())

	// Type is the element type of the stored keys and values; the zero
	// value is float32. The pool itself only moves 4-byte storage words
	// (Type.Words(KVDim) per token per layer): it never reads the numbers.
	Type model.KVType

	// Scrub is how freed pages are cleaned; the zero value poisons.
	Scrub ScrubMode

	// SkipOwnerChecks turns the per-page tag check off. It exists only so a
	// benchmark can measure what the check costs; no configuration key
	// reaches it, and serving never sets it.
	SkipOwnerChecks bool

	// Checksums keeps a CRC32C of every stored K and V vector from when
	// it was written (sums.go): a prefill server's pool, whose KV the
	// transfer then never reads to checksum it. It costs 8 bytes per
	// (token, layer) and a pass over each vector while it is in cache.
	Checksums bool

	// TenantPages caps the pages a tenant's tags may hold at once, pages
	// still draining a lease included. Tenants not listed are unlimited.
	TenantPages map[string]int
}

// ConfigFor returns the configuration of a pool for model c with the given
// number of pages of pageSize tokens.
func ConfigFor(c *model.Config, pages, pageSize int) PoolConfig {
	return PoolConfig{Pages: pages, PageSize: pageSize, Layers: c.Layers, KVDim: c.KVDim()}
}

// RowWords is the number of storage words of one token's keys (and again
// of its values) in one layer: what ReadTokens, WriteTokens, Slot and the
// spans count in, and the unit the transfer protocol moves.
func (c PoolConfig) RowWords() int { return c.Type.Words(c.KVDim) }

// Bytes is the memory the pool's pages take.
func (c PoolConfig) Bytes() int64 {
	return 2 * int64(c.Pages) * int64(c.PageSize) * int64(c.Layers) * int64(c.RowWords()) * 4
}

// Owner names who a page belongs to: an engine request of a tenant, or (for
// shared prefix pages) a prefix-cache entry of a namespace.
type Owner struct {
	Tenant  string
	Request uint64
}

// tag is a page's owner tag as stored: the tenant interned to an id so the
// per-page check is three word compares. gen changes every time the page
// goes back to the free list, so a tag is never seen twice.
type tag struct {
	tenant  uint32
	request uint64
	gen     uint64
}

type pageState uint8

const (
	pageFree   pageState = iota
	pageOwned            // writable by the one Seq that allocated it
	pageShared           // read-only, held by the prefix cache and Seqs that attached it
)

type scrubState uint8

const (
	scrubZero   scrubState = iota // never used, or zeroed: all floats are 0
	scrubPoison                   // poisoned for poisonFor
	scrubNone                     // freed with ScrubOff: holds the old data
)

type page struct {
	tag   tag
	state pageState
	// holders counts page-table entries and shared references (PageRef
	// holds); pins counts leases. The page is free exactly when both are 0.
	holders, pins int32
	refs          int32 // the part of holders taken by SharePage
	scrub         scrubState
	poisonFor     uint64
}

// Pool is a fixed set of KV pages with owner tags, page tables and
// scrubbing. All methods of Pool, Seq and Lease are safe for concurrent use:
// one mutex guards the bookkeeping, so Stats can be read from a metrics
// goroutine while the engine goroutine allocates. The float slices that
// Slot and Spans return are not guarded: only the sequence's owner may
// touch them, and only until it frees or truncates the sequence.
type Pool struct {
	mu       sync.Mutex
	cfg      PoolConfig
	words    int // storage words per token per layer: cfg.RowWords()
	pageLen  int // words per page per K (or V): Layers*PageSize*words
	layerLen int // words per page per layer: PageSize*words
	k, v     []float32
	pages    []page
	free     []int32 // LIFO: recently freed pages are reused first, which makes stale reads show up soonest in tests

	tenantIDs   map[string]uint32
	tenantNames []string
	tenantUsed  []int // pages whose tag names the tenant, by id
	tenantLimit []int // -1: unlimited

	// freed holds a value after pages were freed; see Freed.
	freed chan struct{}

	violations uint64
	scrubs     uint64
	allocs     uint64
	leases     int
	// holdGen moves whenever a page gains or loses a hold, a pin or a
	// share: every event that can change what Idle answers (a fresh
	// reservation cannot, its pages being neither shared nor cached).
	holdGen uint64

	// With Checksums: per cell (Pool.cell), the CRC32C of K and of V
	// (sums[2c], sums[2c+1]), valid where sealed has the cell's bit.
	sums   []uint32
	sealed []uint64
}

// NewPool allocates the pool's memory: 2 × Pages × PageSize × Layers × KVDim
// elements of cfg.Type.
func NewPool(cfg PoolConfig) (*Pool, error) {
	if cfg.Pages <= 0 || cfg.PageSize <= 0 || cfg.Layers <= 0 || cfg.KVDim <= 0 {
		return nil, fmt.Errorf("%w: pages %d, page size %d, layers %d, kv dim %d must all be positive",
			ErrConfig, cfg.Pages, cfg.PageSize, cfg.Layers, cfg.KVDim)
	}
	if err := model.CheckKVLayout(cfg.Type, cfg.KVDim); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if cfg.Scrub > ScrubOff {
		return nil, fmt.Errorf("%w: unknown scrub mode %d", ErrConfig, cfg.Scrub)
	}
	if cfg.Pages > math.MaxInt32 {
		return nil, fmt.Errorf("%w: %d pages, at most %d", ErrConfig, cfg.Pages, math.MaxInt32)
	}
	layerLen, ok := mul(cfg.PageSize, cfg.RowWords())
	pageLen, ok2 := mul(layerLen, cfg.Layers)
	total, ok3 := mul(pageLen, cfg.Pages)
	if !ok || !ok2 || !ok3 || total > math.MaxInt/8 {
		return nil, fmt.Errorf("%w: %d pages × %d tokens × %d layers × %d floats overflows",
			ErrConfig, cfg.Pages, cfg.PageSize, cfg.Layers, cfg.KVDim)
	}
	if uint64(total) > maxPoolWords {
		return nil, fmt.Errorf("%w: %d pages × %d tokens × %d layers × %d words is %d bytes each for K and V, more than one allocation can hold (%d)",
			ErrConfig, cfg.Pages, cfg.PageSize, cfg.Layers, cfg.RowWords(), 4*uint64(total), 4*uint64(maxPoolWords))
	}
	p := &Pool{
		cfg:       cfg,
		words:     cfg.RowWords(),
		pageLen:   pageLen,
		layerLen:  layerLen,
		k:         make([]float32, total),
		v:         make([]float32, total),
		pages:     make([]page, cfg.Pages),
		free:      make([]int32, cfg.Pages),
		tenantIDs: map[string]uint32{},
		freed:     make(chan struct{}, 1),
	}
	if cfg.Checksums {
		cells := cfg.Pages * cfg.Layers * cfg.PageSize
		p.sums, p.sealed = make([]uint32, 2*cells), make([]uint64, (cells+63)/64)
	}
	for i := range p.free {
		// Highest index at the bottom, so allocation starts at page 0.
		p.free[i] = int32(cfg.Pages - 1 - i)
	}
	for name, limit := range cfg.TenantPages {
		if limit < 0 {
			return nil, fmt.Errorf("%w: tenant %q page quota %d is negative", ErrConfig, name, limit)
		}
		p.tenantLimit[p.intern(name)] = limit
	}
	return p, nil
}

// maxPoolWords bounds each of the pool's K and V slices: 2^48 bytes is the
// most one Go allocation may hold on 64-bit platforms, and make panics
// beyond it instead of failing.
const maxPoolWords = 1 << 46

func mul(a, b int) (int, bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	c := a * b
	return c, c/b == a
}

// intern returns the tenant's id, registering it on first sight. Tenants
// are never forgotten; their number is bounded by configuration.
func (p *Pool) intern(name string) uint32 {
	if id, ok := p.tenantIDs[name]; ok {
		return id
	}
	id := uint32(len(p.tenantNames))
	p.tenantIDs[name] = id
	p.tenantNames = append(p.tenantNames, name)
	p.tenantUsed = append(p.tenantUsed, 0)
	p.tenantLimit = append(p.tenantLimit, -1)
	return id
}

// Capacity returns the number of pages and the tokens per page.
func (p *Pool) Capacity() (pages, pageSize int) { return p.cfg.Pages, p.cfg.PageSize }

// TenantTokens is the most tokens one sequence of tenant can ever hold
// under its page quota (TenantPages × PageSize); ok is false when the
// tenant has no quota.
func (p *Pool) TenantTokens(tenant string) (tokens int, ok bool) {
	pages, ok := p.cfg.TenantPages[tenant]
	return pages * p.cfg.PageSize, ok
}

// Config returns the configuration the pool was built with.
func (p *Pool) Config() PoolConfig { return p.cfg }

// reserve takes n pages off the free list for tenant, or none of them. The
// caller holds mu.
func (p *Pool) reserve(tenant uint32, n int) ([]int32, error) {
	if n == 0 {
		return nil, nil
	}
	if lim := p.tenantLimit[tenant]; lim >= 0 && n > lim-p.tenantUsed[tenant] { // no sum to wrap
		return nil, &QuotaError{Tenant: p.tenantNames[tenant], Used: p.tenantUsed[tenant], Need: n, Limit: lim}
	}
	if n > len(p.free) {
		return nil, &PoolFullError{Need: n, Free: len(p.free), Pages: p.cfg.Pages, PageSize: p.cfg.PageSize}
	}
	got := make([]int32, n)
	copy(got, p.free[len(p.free)-n:])
	p.free = p.free[:len(p.free)-n]
	for _, i := range got {
		pg := &p.pages[i]
		pg.state = pageOwned
		pg.holders = 1
		pg.tag.tenant = tenant
	}
	p.tenantUsed[tenant] += n
	p.allocs += uint64(n)
	return got, nil
}

// drop removes one holder (or, with pin, one lease pin) from page i and
// frees it when nothing references it any more. The caller holds mu.
func (p *Pool) drop(i int32, pin bool) {
	p.holdGen++
	pg := &p.pages[i]
	if pin {
		pg.pins--
	} else {
		pg.holders--
	}
	if pg.holders < 0 || pg.pins < 0 {
		panic(fmt.Sprintf("kv: page %d reference count went negative (holders %d, pins %d)", i, pg.holders, pg.pins))
	}
	if pg.holders > 0 || pg.pins > 0 {
		return
	}
	p.scrubPage(int(i), pg)
	p.unsealPage(i)
	p.tenantUsed[pg.tag.tenant]--
	// The generation moves on now, not at the next allocation, so that any
	// stale table entry fails its check even while the page sits free.
	pg.tag = tag{gen: pg.tag.gen + 1}
	pg.state = pageFree
	p.free = append(p.free, i)
	select {
	case p.freed <- struct{}{}:
	default: // a signal is already pending; one is enough
	}
}

// Freed returns a channel that receives a value after pages have been
// freed, however they were: a sequence's Free or Truncate, a lease ended
// or expired, the prefix cache letting a block go. A scheduler whose
// queue waits for pages held outside it (a decode server's reservation,
// KV still in transfer) sleeps on it instead of polling the pool. The
// channel is buffered one deep and shared, so it suits one waiter, which
// must look at the pool again after each value: any number of frees since
// the last receive leave a single value.
func (p *Pool) Freed() <-chan struct{} { return p.freed }

func (p *Pool) scrubPage(i int, pg *page) {
	off := i * p.pageLen
	k, v := p.k[off:off+p.pageLen], p.v[off:off+p.pageLen]
	switch p.cfg.Scrub {
	case ScrubPoison:
		fillPoison(k, pg.tag.request)
		fillPoison(v, pg.tag.request)
		pg.scrub, pg.poisonFor = scrubPoison, pg.tag.request
	case ScrubZero:
		clear(k)
		clear(v)
		pg.scrub = scrubZero
	default:
		pg.scrub = scrubNone
		return
	}
	p.scrubs++
}

// check verifies that page table entry e still names the page incarnation
// it was made for, counting a violation when it does not. The caller holds
// mu. This is the per-page ownership check; it never looks at page data.
func (p *Pool) check(e entry) error {
	pg := &p.pages[e.page]
	if pg.tag == e.tag && pg.state != pageFree || p.cfg.SkipOwnerChecks {
		return nil
	}
	p.violations++
	reason := "page belongs to another owner"
	switch {
	case pg.state == pageFree:
		reason = "page was freed"
	case pg.tag.gen != e.tag.gen:
		reason = "page was freed and reused"
	}
	return &OwnershipError{Page: int(e.page), WantGen: e.tag.gen, HaveGen: pg.tag.gen, Reason: reason}
}

// span returns page i's K and V for layer, tokens [from, to) of the page.
// The slices are capped at their length, so whoever gets them cannot
// reslice past the end into the next page (someone else's).
func (p *Pool) span(i int32, layer, from, to int) (k, v []float32) {
	base := int(i)*p.pageLen + layer*p.layerLen
	lo, hi := base+from*p.words, base+to*p.words
	return p.k[lo:hi:hi], p.v[lo:hi:hi]
}

// Stats is a snapshot of the pool for metrics and tests.
type Stats struct {
	Pages, PageSize int
	// Free + Owned + Shared + Pending == Pages.
	Free    int
	Owned   int // held by the one sequence that allocated it
	Shared  int // read-only prefix pages held by the cache or sequences
	Pending int // released by every holder, waiting for leases to drain
	Leases  int // leases not yet released
	// TenantPages counts non-free pages by the tenant in their tag (shared
	// pages under their namespace owner). Tenants at zero are omitted.
	TenantPages map[string]int
	// Violations counts failed ownership checks. It must stay zero.
	Violations uint64
	// Scrubs counts pages scrubbed on their way back to the free list.
	Scrubs uint64
	// Allocs counts pages handed out since the pool was made: a request
	// rejected at admission must not move it.
	Allocs uint64
}

// Stats returns a snapshot. Safe for concurrent use.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Stats{
		Pages: p.cfg.Pages, PageSize: p.cfg.PageSize, Free: len(p.free), Leases: p.leases,
		TenantPages: map[string]int{}, Violations: p.violations, Scrubs: p.scrubs, Allocs: p.allocs,
	}
	for i := range p.pages {
		pg := &p.pages[i]
		switch {
		case pg.state == pageFree:
		case pg.holders == 0:
			s.Pending++
		case pg.state == pageShared:
			s.Shared++
		default:
			s.Owned++
		}
	}
	for id, n := range p.tenantUsed {
		if n != 0 {
			s.TenantPages[p.tenantNames[id]] = n
		}
	}
	return s
}

// Violations returns the number of failed ownership checks so far. Safe for
// concurrent use.
func (p *Pool) Violations() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.violations
}

// CheckScrubbed verifies that every page on the free list holds only zeros
// or the poison pattern of its previous owner, reading every float: a test
// helper for isolation tests, O(pool size). With ScrubOff it reports the
// first free page that was not scrubbed.
func (p *Pool) CheckScrubbed() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	free := append([]int32(nil), p.free...)
	sort.Slice(free, func(a, b int) bool { return free[a] < free[b] })
	for _, i := range free {
		pg := &p.pages[i]
		if pg.state != pageFree || pg.holders != 0 || pg.pins != 0 {
			return fmt.Errorf("kv: page %d is on the free list but in state %d with %d holders, %d pins", i, pg.state, pg.holders, pg.pins)
		}
		off := int(i) * p.pageLen
		for _, buf := range [][]float32{p.k[off : off+p.pageLen], p.v[off : off+p.pageLen]} {
			switch pg.scrub {
			case scrubZero:
				for j, x := range buf {
					if math.Float32bits(x) != 0 {
						return fmt.Errorf("kv: free page %d should be zero but float %d is %v", i, j, x)
					}
				}
			case scrubPoison:
				if !isPoison(buf, pg.poisonFor) {
					return fmt.Errorf("kv: free page %d does not hold the poison pattern of request %d", i, pg.poisonFor)
				}
			default:
				return fmt.Errorf("kv: free page %d was not scrubbed (scrub mode %v)", i, p.cfg.Scrub)
			}
		}
	}
	return nil
}
