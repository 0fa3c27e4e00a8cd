// Command bulkhead is a multi-tenant LLM inference server. One binary holds
// every role; the first argument picks it.
//
// This file only dispatches: flags, wiring and exit codes live in one file
// per subcommand, and all the work in internal packages.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"syscall"

	"github.com/bulkhead-llm/bulkhead/internal/kernels"
)

// command is one subcommand: a one-line summary and a run function that
// gets the arguments after the subcommand's name.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{}

func register(name, summary string, run func(args []string, stdout, stderr io.Writer) error) {
	commands[name] = command{summary: summary, run: run}
}

// usageError marks an error caused by how the command was invoked; it exits
// with status 2, like the flag package. usage, when set, is the command's
// flag list, printed on stderr after the error (for a flag the parser
// refused).
type usageError struct {
	err   error
	usage string
}

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usagef(format string, args ...any) error {
	return usageError{err: fmt.Errorf(format, args...)}
}

// helpRequest is the answer to -h, -help or --help: the usage text, for
// stdout, and exit status 0. It matches flag.ErrHelp.
type helpRequest struct{ text string }

func (h helpRequest) Error() string        { return flag.ErrHelp.Error() }
func (h helpRequest) Is(target error) bool { return target == flag.ErrHelp }

func main() {
	if v := os.Getenv(kernelsEnv); v != "" {
		// Here rather than in run: the choice is process-wide and must
		// precede every product, and run is also called by tests that
		// share one process.
		if err := kernels.Use(v); err != nil {
			fmt.Fprintf(os.Stderr, "bulkhead: %s: %v\n", kernelsEnv, err)
			os.Exit(2)
		}
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// kernelsEnv names the environment variable that picks the kernel family
// (kernels.Use): auto, avx2 or generic.
const kernelsEnv = "BULKHEAD_KERNELS"

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		args = []string{"serve"}
	}
	name := args[0]
	if name == "-h" || name == "-help" || name == "--help" || name == "help" {
		printUsage(stdout)
		return 0
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "bulkhead: unknown command %q\n\n", name)
		printUsage(stderr)
		return 2
	}
	err := cmd.run(args[1:], stdout, stderr)
	var (
		stopped interrupted
		help    helpRequest
		usage   usageError
	)
	switch {
	case err == nil:
		return 0
	case errors.As(err, &help):
		// Asked for: stdout, like the top-level help, so that it pipes
		// into a pager.
		fmt.Fprint(stdout, help.text)
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "bulkhead %s: %v\n", name, err)
		fmt.Fprint(stderr, usage.usage)
		return 2
	case errors.As(err, &stopped):
		// 128 + the signal, as a shell reports a command a signal ended:
		// the work stopped because it was asked to, not because it failed.
		fmt.Fprintf(stderr, "bulkhead %s: %v\n", name, err)
		if n, ok := stopped.sig.(syscall.Signal); ok {
			return 128 + int(n)
		}
		return 1
	default:
		fmt.Fprintf(stderr, "bulkhead %s: %v\n", name, err)
		return 1
	}
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: bulkhead <command> [flags]   (no command: serve)")
	fmt.Fprintln(w)
	var names []string
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'bulkhead <command> -h' for a command's flags.")
	fmt.Fprintf(w, "%s=avx2 or =generic picks another kernel family than auto's (same results).\n", kernelsEnv)
}

// newFlags returns a FlagSet that reports errors instead of exiting or
// printing, so that run prints each once, on the right stream, and maps
// it to an exit code.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("bulkhead "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// flagUsage is fs's usage text: its name and every flag with its help.
func flagUsage(fs *flag.FlagSet) string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: %s [flags]\n", fs.Name())
	out := fs.Output()
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(out)
	return b.String()
}

// checkRange refuses flag --name's value v outside lo..hi as a usage error
// that names the flag, the range and the value.
func checkRange(name string, v, lo, hi int) error {
	switch {
	case v >= lo && v <= hi:
		return nil
	case hi == math.MaxInt:
		return usagef("--%s must be at least %d, got %d", name, lo, v)
	default:
		return usagef("--%s must be %d to %d, got %d", name, lo, hi, v)
	}
}

// parse parses flags and refuses stray positional arguments, which are
// almost always a mistyped flag. -h is a helpRequest; a flag the parser
// refuses is a usageError carrying the flag list.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return helpRequest{text: flagUsage(fs)}
		}
		return usageError{err: err, usage: flagUsage(fs)}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (flags go before it, as -name value)", strings.Join(fs.Args(), " "))
	}
	return nil
}
