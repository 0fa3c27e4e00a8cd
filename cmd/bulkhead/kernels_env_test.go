package main

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

// BULKHEAD_KERNELS picks the kernel family for the whole process. Every
// family this machine runs must print the same completion for a Q8_0
// model (the family with AVX-512 VNNI products included, where the CPU
// has it), and a name the process cannot run must stop it with a clear
// error before it does anything.
func TestKernelsEnv(t *testing.T) {
	bin := bulkheadBinary(t)
	model := convertEmbedded(t, "q8_0")
	gen := func(family string) (string, string, error) {
		cmd := exec.Command(bin, "generate", "--model", model, "--prompt", "Once upon a time, in a big forest, there was",
			"--max-tokens", "60", "--temperature", "0")
		cmd.Env = append(os.Environ(), kernelsEnv+"="+family)
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), err
	}
	want, errOut, err := gen("auto")
	if err != nil || want == "" {
		t.Fatalf("auto: %v, %q\n%s", err, want, errOut)
	}
	families := []string{"generic"}
	if runtime.GOARCH == "amd64" {
		families = append(families, "avx2")
	}
	for _, f := range families {
		got, errOut, err := gen(f)
		if err != nil && f == "avx2" && strings.Contains(errOut, "no AVX2 kernels") {
			t.Logf("avx2: this CPU has none: %s", errOut)
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v\n%s", f, err, errOut)
		}
		if got != want {
			t.Errorf("%s kernels: %q, auto: %q", f, got, want)
		}
	}
	_, errOut, err = gen("avx512")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Fatalf("unknown family: %v, want exit status 2", err)
	}
	if !strings.Contains(errOut, `BULKHEAD_KERNELS: kernels "avx512": unknown family; want auto, avx2 or generic`) {
		t.Errorf("unknown family: stderr %q", errOut)
	}
}
