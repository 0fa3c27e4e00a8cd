package api

import "strings"

// stopMatcher finds stop sequences in generated text as it streams in. It
// holds back the shortest tail that could still become a stop sequence, so
// that text it releases never has to be taken back, and a stop sequence is
// never shown even when it spans several tokens.
//
// Why searching only the unreleased text suffices: released text ends
// before the earliest position p whose suffix text[p:] is a prefix of some
// stop sequence. A match starting before that position would have been
// either complete already (and found) or a prefix of a stop (contradicting
// the choice of p).
type stopMatcher struct {
	stops []string
	text  strings.Builder // all generated text
	sent  int             // bytes of text released
	done  bool
}

// add appends generated text and returns what may be released now, and
// whether a stop sequence was found (then nothing after it is released and
// the matcher is done).
func (m *stopMatcher) add(s string) (release string, stopped bool) {
	if m.done {
		return "", true
	}
	m.text.WriteString(s)
	all := m.text.String()
	pending := all[m.sent:]
	if at := m.firstStop(pending); at >= 0 {
		m.done = true
		m.sent = len(all)
		return pending[:at], true
	}
	keep := m.heldTail(pending)
	release = pending[:len(pending)-keep]
	m.sent += len(release)
	return release, false
}

// flush releases the held tail at the end of generation: it never became a
// stop sequence.
func (m *stopMatcher) flush() string {
	if m.done {
		return ""
	}
	all := m.text.String()
	rest := all[m.sent:]
	m.sent = len(all)
	return rest
}

// firstStop is the earliest index in s where any stop sequence begins, or -1.
func (m *stopMatcher) firstStop(s string) int {
	best := -1
	for _, stop := range m.stops {
		if i := strings.Index(s, stop); i >= 0 && (best < 0 || i < best) {
			best = i
		}
	}
	return best
}

// heldTail is the length of the longest suffix of s that is a proper prefix
// of some stop sequence.
func (m *stopMatcher) heldTail(s string) int {
	longest := 0
	for _, stop := range m.stops {
		for n := min(len(stop)-1, len(s)); n > longest; n-- {
			if strings.HasSuffix(s, stop[:n]) {
				longest = n
				break
			}
		}
	}
	return longest
}
