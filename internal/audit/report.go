package audit

import (
	"fmt"
	"io"
	"strings"
)

// textFindings is how many findings per check the text report shows.
const textFindings = 5

// WriteText prints rep for a person: a header, one line per check with its
// verdict and summary, the evidence under it, and a last line with the
// overall verdict. It names tenants only by name.
func WriteText(w io.Writer, rep *Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "bulkhead audit of %s, model %s\n", orUnknown(rep.Target), rep.Model)
	fmt.Fprintf(&b, "tenants %s; seed %d, %s", strings.Join(rep.Tenants, ", "), rep.Seed, plural(rep.Rounds, "round"))
	if rep.Concurrency > 0 {
		fmt.Fprintf(&b, ", concurrency %d", rep.Concurrency)
	}
	fmt.Fprintf(&b, "; %d requests (%d solo, %d mixed); over-limit prompts of %d tokens",
		rep.Requests, rep.Solo, rep.Requests-rep.Solo, rep.OverLength)
	if rep.ContextLenSource != "" {
		fmt.Fprintf(&b, " (context length %d from %s)", rep.OverLength-1, rep.ContextLenSource)
	}
	b.WriteString("\n\n")
	for _, c := range rep.Checks {
		fmt.Fprintf(&b, "%s  %-16s  %s: %s\n", c.Status, c.ID, c.Title, c.Summary)
		for _, f := range c.Findings[:min(len(c.Findings), textFindings)] {
			who := f.Request
			if f.Tenant != "" && !strings.Contains(who, f.Tenant) {
				who = f.Tenant + ", " + who
			}
			fmt.Fprintf(&b, "      %s %s\n", f.Status, who)
			if f.Expected != "" {
				fmt.Fprintf(&b, "           expected: %s\n", f.Expected)
			}
			fmt.Fprintf(&b, "           got:      %s\n", f.Got)
			if f.Why != "" {
				fmt.Fprintf(&b, "           %s\n", f.Why)
			}
		}
		if more := c.Omitted + len(c.Findings) - min(len(c.Findings), textFindings); more > 0 {
			fmt.Fprintf(&b, "      ... and %d more (--json lists up to %d per check)\n", more, maxFindings)
		}
	}
	counts := map[Status]int{}
	for _, c := range rep.Checks {
		counts[c.Status]++
	}
	fmt.Fprintf(&b, "\n%s: %d checks passed, %d failed, %d warned, %d skipped\n",
		rep.Status, counts[Pass], counts[Fail], counts[Warn], counts[Skip])
	_, err := io.WriteString(w, b.String())
	return err
}

func orUnknown(s string) string {
	if s == "" {
		return "an endpoint"
	}
	return s
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
