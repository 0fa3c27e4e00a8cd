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
	"os"
	"sort"
	"strings"
	"syscall"
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
// with status 2, like the flag package.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		args = []string{"serve"}
	}
	name := args[0]
	if name == "-h" || name == "--help" || name == "help" {
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
	var stopped interrupted
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "bulkhead %s: %v\n", name, err)
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
}

// newFlags returns a FlagSet that reports errors instead of exiting, so
// that run can map them to exit codes.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("bulkhead "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parse parses flags and refuses stray positional arguments, which are
// almost always a mistyped flag.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (flags go before it, as -name value)", strings.Join(fs.Args(), " "))
	}
	return nil
}
