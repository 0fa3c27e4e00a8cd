package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestListenAddressRefusedFirst: a listen address that cannot be bound is
// refused before anything is loaded, with the flag and the problem named.
// Each command is also given something that fails later (a model that
// does not exist, a router without --config, a prefill or decode server
// without peer credentials), so an address checked late shows up as that
// other error instead.
func TestListenAddressRefusedFirst(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-model.gguf")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--model", missing, "--listen", "bogus"}, `--listen "bogus": missing port`},
		{[]string{"serve", "--model", missing, "--listen", "127.0.0.1:99999"}, `--listen "127.0.0.1:99999": port "99999" is not a number from 0 to 65535`},
		{[]string{"serve", "--model", missing, "--listen", "127.0.0.1:"}, `--listen "127.0.0.1:": port ""`},
		{[]string{"serve", "--model", missing, "--listen", "127.0.0.1:http"}, `--listen "127.0.0.1:http": port "http"`},
		{[]string{"serve", "--model", missing, "--metrics-listen", "9090"}, `--metrics-listen "9090": missing port`},
		{[]string{"serve", "--model", missing, "--listen", "1:2:3"}, `--listen "1:2:3": too many colons`},
		{[]string{"router", "--listen", "bogus"}, `--listen "bogus": missing port`},
		{[]string{"router", "--metrics-listen", "127.0.0.1:-1"}, `--metrics-listen "127.0.0.1:-1": port "-1"`},
		{[]string{"prefill", "--listen", "bogus"}, `--listen "bogus": missing port`},
		{[]string{"prefill", "--metrics-listen", "bogus"}, `--metrics-listen "bogus": missing port`},
		{[]string{"decode", "--listen", "bogus"}, `--listen "bogus": missing port`},
		{[]string{"decode", "--kv-listen", "bogus"}, `--kv-listen "bogus": missing port`},
		{[]string{"decode", "--metrics-listen", "[::1]"}, `--metrics-listen "[::1]": missing port`},
		{[]string{"cluster", "--config", missing, "--listen", "bogus"}, `--listen "bogus": missing port`},
		{[]string{"cluster", "--config", missing, "--metrics-listen", "bogus"}, `--metrics-listen "bogus": missing port`},
	}
	for _, c := range cases {
		out, errOut, code := runCLI(t, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) || out != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 naming %q", c.args, code, out, errOut, c.want)
		}
	}
}

// TestBusyListenAddressBeforeLoad: an address already in use is reported
// before the model is loaded (here a file that is not a model, whose
// load would fail with another error), for the API's and the metrics'
// listeners, for every serving command.
func TestBusyListenAddressBeforeLoad(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.gguf")
	psk := filepath.Join(dir, "psk")
	if err := os.WriteFile(junk, []byte(strings.Repeat("not a model ", 100)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(psk, []byte(strings.Repeat("k", 48)), 0o600); err != nil {
		t.Fatal(err)
	}
	plain := writeConfig(t, "model: "+junk+"\n")
	peers := writeConfig(t, "model: "+junk+"\npeers:\n  auth: psk\n  psk_file: "+psk+"\n  prefill: [127.0.0.1:1]\n  decode: [127.0.0.1:2]\n")
	free := "127.0.0.1:0"
	cases := []struct {
		args []string
		flag string
	}{
		{[]string{"serve", "--config", plain, "--listen", addr}, "--listen"},
		{[]string{"serve", "--config", plain, "--listen", free, "--metrics-listen", addr}, "--metrics-listen"},
		{[]string{"router", "--config", peers, "--listen", addr}, "--listen"},
		{[]string{"router", "--config", peers, "--listen", free, "--metrics-listen", addr}, "--metrics-listen"},
		{[]string{"prefill", "--config", peers, "--listen", addr}, "--listen"},
		{[]string{"prefill", "--config", peers, "--listen", free, "--metrics-listen", addr}, "--metrics-listen"},
		{[]string{"decode", "--config", peers, "--listen", addr}, "--listen"},
		{[]string{"decode", "--config", peers, "--listen", free, "--kv-listen", addr}, "--kv-listen"},
	}
	for _, c := range cases {
		_, errOut, code := runCLI(t, c.args...)
		if code != 1 || !strings.Contains(errOut, c.flag+": listen tcp "+addr) || !strings.Contains(errOut, "address already in use") {
			t.Errorf("%q: exit %d, stderr %q; want exit 1, %s and address already in use", c.args, code, errOut, c.flag)
		}
	}
	// From the config, the error names the config's key.
	taken := writeConfig(t, "model: "+junk+"\nlisten: "+addr+"\n")
	if _, errOut, code := runCLI(t, "serve", "--config", taken); code != 1 || !strings.Contains(errOut, "listen (in "+taken+"): listen tcp "+addr) {
		t.Errorf("serve with a taken listen in its config: exit %d, stderr %q", code, errOut)
	}
	bad := writeConfig(t, "model: "+junk+"\nlisten: localhost\n")
	if _, errOut, code := runCLI(t, "serve", "--config", bad); code != 1 || !strings.Contains(errOut, `listen (in `+bad+`) "localhost": missing port`) {
		t.Errorf("serve with a bad listen in its config: exit %d, stderr %q", code, errOut)
	}
}

// TestFlagErrorsPrintOnce: a flag the parser refuses is reported once, on
// stderr, followed by the command's flags, with exit status 2 and nothing
// on stdout.
func TestFlagErrorsPrintOnce(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"generate", "--max-tokens", "many"}, `invalid value "many" for flag -max-tokens`},
		{[]string{"bench", "load", "--requests"}, "flag needs an argument: -requests"},
		{[]string{"audit", "--rounds", "x"}, `invalid value "x" for flag -rounds`},
		{[]string{"certs", "-nope"}, "flag provided but not defined: -nope"},
	}
	for _, c := range cases {
		out, errOut, code := runCLI(t, c.args...)
		if code != 2 || out != "" || strings.Count(errOut, c.want) != 1 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q once on stderr", c.args, code, out, errOut, c.want)
		}
		if !strings.Contains(errOut, "usage: bulkhead "+c.args[0]) || !strings.Contains(errOut, "  -") {
			t.Errorf("%q: stderr %q does not list the command's flags", c.args, errOut)
		}
	}
	// A usage error found after parsing is one line, printed once.
	_, errOut, code := runCLI(t, "bench", "load", "--target", "http://127.0.0.1:1", "--requests", "0")
	if code != 2 || strings.Count(errOut, "--requests") != 1 {
		t.Errorf("bench load --requests 0: exit %d, stderr %q; want exit 2 and one mention of --requests", code, errOut)
	}
}

// TestHelpGoesToStdout: help asked for, at the top level or of any
// command, goes to stdout with exit status 0; usage printed because of a
// mistake goes to stderr with exit status 2.
func TestHelpGoesToStdout(t *testing.T) {
	var cmds [][]string
	for name := range commands {
		cmds = append(cmds, []string{name})
	}
	cmds = append(cmds, []string{"bench", "load"}, []string{"bench", "model"})
	for _, h := range []string{"-h", "-help", "--help"} {
		out, errOut, code := runCLI(t, h)
		if code != 0 || errOut != "" || !strings.Contains(out, "usage: bulkhead <command>") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want the command list on stdout", h, code, out, errOut)
		}
		for _, c := range cmds {
			args := append(append([]string(nil), c...), h)
			out, errOut, code := runCLI(t, args...)
			if code != 0 || errOut != "" || !strings.Contains(out, "usage: bulkhead "+c[0]) {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want help on stdout, exit 0", args, code, out, errOut)
			}
		}
	}
	for _, args := range [][]string{{"nosuchcommand"}, {"bench"}, {"bench", "nosuch"}} {
		out, errOut, code := runCLI(t, args...)
		if code != 2 || out != "" || !strings.Contains(errOut, "usage: bulkhead") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want usage on stderr, exit 2", args, code, out, errOut)
		}
	}
}

// TestRangeErrorsNameTheFlag: every value out of its flag's range is
// refused with exit status 2 and an error that names the flag and the
// value, before anything is loaded or sent.
func TestRangeErrorsNameTheFlag(t *testing.T) {
	target := "http://127.0.0.1:1" // never reached: each is refused first
	load := []string{"bench", "load", "--target", target, "--model", "m", "--concurrency", "1"}
	aud := []string{"audit", "--target", target, "--key", "a=aaaaaaaaaa", "--key", "b=bbbbbbbbbb"}
	with := func(base []string, more ...string) []string { return append(append([]string(nil), base...), more...) }
	var many []string
	for i := range 65 {
		many = append(many, "--key", fmt.Sprintf("t%d=key-of-tenant-%d", i, i))
	}
	cases := []struct {
		args []string
		want string
	}{
		{with(load, "--requests", "0"), "--requests must be 1 to 1000000, got 0"},
		{with(load, "--requests", "1000001"), "--requests must be 1 to 1000000, got 1000001"},
		{with(load, "--requests", "1", "--warmup", "-1"), "--warmup must be 0 to 1000000, got -1"},
		{with(load, "--requests", "1", "--prompt-tokens", "0"), "--prompt-tokens must be 1 to 1000000, got 0"},
		{with(load, "--requests", "1", "--max-tokens", "0"), "--max-tokens must be 1 to 1000000, got 0"},
		{with(load, "--requests", "1", "--temperature", "-1"), "--temperature must be a finite number, 0 or more, got -1"},
		{with(load, "--requests", "1", "--temperature", "NaN"), "--temperature must be a finite number, 0 or more, got NaN"},
		{with(load, "--requests", "1", "--timeout", "0s"), "--timeout must be a positive duration, got 0s"},
		{with(load, "--requests", "1", "--concurrency", "0"), "--concurrency \"0\""},
		{with(aud, "--rounds", "0"), "--rounds must be 1 to 1000, got 0"},
		{with(aud, "--rounds", "1001"), "--rounds must be 1 to 1000, got 1001"},
		{with(aud, "--concurrency", "0"), "--concurrency must be 1 to 4096, got 0"},
		{with(aud, "--context-len", "-1"), "--context-len must be 0 to 4194303, got -1"},
		{with(aud, "--context-len", "4194304"), "--context-len must be 0 to 4194303, got 4194304"},
		{with(aud, "--timeout", "-1s"), "--timeout must be a positive duration, got -1s"},
		{with([]string{"audit", "--target", target}, many...), "--key is given for 65 tenants; an audit takes at most 64"},
		{[]string{"audit", "--target", target, "--key", "a b=aaaaaaaaaa", "--key", "b=bbbbbbbbbb"}, "--key: tenant name \"a b\""},
		{[]string{"bench", "model", "--prompt-tokens", "0"}, "--prompt-tokens must be at least 1, got 0"},
		{[]string{"bench", "model", "--gen-tokens", "-3"}, "--gen-tokens must be at least 1, got -3"},
		{[]string{"bench", "model", "--reps", "0"}, "--reps must be at least 1, got 0"},
		{[]string{"cluster", "--prefill", "0"}, "--prefill must be 1 to 32, got 0"},
		{[]string{"cluster", "--decode", "33"}, "--decode must be 1 to 32, got 33"},
		{[]string{"generate", "--prompt", "x", "--max-tokens", "0"}, "--max-tokens must be at least 1, got 0"},
		{[]string{"generate", "--prompt", "x", "--temperature", "-0.5"}, "--temperature must be 0 to 100, got -0.5"},
		{[]string{"generate", "--prompt", "x", "--temperature", "NaN"}, "--temperature must be 0 to 100, got NaN"},
		{[]string{"generate", "--prompt", "x", "--top-k", "-1"}, "--top-k must be at least 0 (0: all tokens), got -1"},
		{[]string{"generate", "--prompt", "x", "--top-p", "1.5"}, "--top-p must be 0 to 1, got 1.5"},
		{[]string{"convert", "--out", filepath.Join(t.TempDir(), "x.gguf"), "--type", "q9_9"}, "--type: unknown tensor type \"q9_9\""},
		{[]string{"convert", "--out", filepath.Join(t.TempDir(), "x.gguf"), "--random", "nosuch"}, "--random: unknown shape \"nosuch\""},
	}
	for _, c := range cases {
		out, errOut, code := runCLI(t, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) || out != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 with %q", c.args, code, out, errOut, c.want)
		}
	}
}
