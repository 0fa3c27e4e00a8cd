package tokenizer

// The merge engine shared by both vocabulary kinds. Symbols form a linked list over a word;
// candidate pairs sit in a binary heap ordered by priority (lower first) and then by the left
// symbol's position (leftmost first). Entries go stale when a neighbour merges; they are
// checked when popped instead of being removed, which keeps each merge O(log n) and the whole
// word O(n log n) where rescanning all pairs would be O(n²) on long runs.

type symbol struct {
	start, end int // byte span in the word
	id         int32
	prev, next int // indices into the symbol slice; -1 at the ends
}

type candidate struct {
	prio        float64
	left, right int // symbol indices
	lend, rend  int // symbol ends when pushed, to detect staleness
	result      int32
}

type candHeap []candidate

func (h candHeap) less(i, j int) bool {
	if h[i].prio != h[j].prio {
		return h[i].prio < h[j].prio
	}
	return h[i].left < h[j].left
}

func (h *candHeap) push(c candidate) {
	*h = append(*h, c)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *candHeap) pop() candidate {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(s) {
			break
		}
		m := l
		if r := l + 1; r < len(s) && s.less(r, l) {
			m = r
		}
		if !s.less(m, i) {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// pairFunc reports whether symbols a and b (adjacent, a first) can merge, with the merge's
// priority (lower merges first) and resulting id.
type pairFunc func(a, b *symbol) (prio float64, result int32, ok bool)

// mergeSymbols applies merges in priority order until none applies. syms must be linked in
// order; the surviving symbols are returned in order.
func mergeSymbols(syms []symbol, pair pairFunc) []symbol {
	if len(syms) < 2 {
		return syms
	}
	var h candHeap
	try := func(l int) {
		r := syms[l].next
		if r < 0 {
			return
		}
		if prio, res, ok := pair(&syms[l], &syms[r]); ok {
			h.push(candidate{prio: prio, left: l, right: r, lend: syms[l].end, rend: syms[r].end, result: res})
		}
	}
	for i := 0; i < len(syms)-1; i++ {
		try(i)
	}
	for len(h) > 0 {
		c := h.pop()
		l, r := &syms[c.left], &syms[c.right]
		// A merged-away symbol gets end = -1 and a merged-into symbol a larger end; spans only
		// grow, so unchanged ends mean both symbols are exactly as when the pair was pushed.
		if l.end != c.lend || r.end != c.rend || l.next != c.right {
			continue
		}
		l.end = r.end
		l.id = c.result
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = c.left
		}
		r.end = -1
		if l.prev >= 0 {
			try(l.prev)
		}
		try(c.left)
	}
	out := syms[:0]
	for i := 0; i >= 0; {
		s := syms[i]
		i = s.next
		out = append(out, s)
	}
	return out
}
