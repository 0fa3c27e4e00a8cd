package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/bulkhead-llm/bulkhead/internal/convert"
	"github.com/bulkhead-llm/bulkhead/internal/embedded"
	"github.com/bulkhead-llm/bulkhead/internal/llama2c"
	"github.com/bulkhead-llm/bulkhead/internal/mmapfile"
	"github.com/bulkhead-llm/bulkhead/internal/tensor"
	"github.com/bulkhead-llm/bulkhead/internal/tokenizer"
)

func init() {
	register("convert", "write a GGUF file from a llama2.c checkpoint, or a random model for benchmarks", runConvert)
}

func runConvert(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("convert")
	checkpoint := fs.String("checkpoint", "", "llama2.c checkpoint to convert (default: the embedded stories260K)")
	tokPath := fs.String("tokenizer", "", "llama2.c tokenizer file for --checkpoint")
	random := fs.String("random", "", "write a random-weight model of this shape instead: "+convert.ShapeNames())
	seed := fs.Uint64("seed", 1, "seed for --random weights")
	typ := fs.String("type", "f32", "weight type: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, q4_k_m or q5_k_m (llama.cpp's mixes of q4_k or q5_k with q6_k), q3_k_m (its mix of q3_k with q4_k, q5_k and q6_k); q2_k is llama.cpp's Q2_K mix (q2_k with q3_k, q4_k and q6_k), not q2_k throughout; K-quants need rows of a multiple of 256, other matrices fall back as in llama.cpp (q2_k and q3_k to q4_0, q4_k to q5_0, q5_k to q5_1, q6_k to q8_0; f16 if rows are not a multiple of 32)")
	out := fs.String("out", "", "output GGUF path (required); a symbolic link is written through to its target")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return usagef("--out is required")
	}
	if fi, err := os.Stat(*out); err == nil && fi.IsDir() {
		// Said now, not after a conversion that can take minutes.
		return usagef("--out %s is a directory; name the GGUF file to write", *out)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	// A flag the chosen source ignores is a mistake to report, not to
	// drop: --tokenizer alone would otherwise quietly convert the
	// embedded model with the embedded tokenizer.
	switch {
	case *random != "" && *checkpoint != "":
		return usagef("--random and --checkpoint are exclusive")
	case *random != "" && set["tokenizer"]:
		return usagef("--tokenizer applies to --checkpoint; --random models use the embedded tokenizer")
	case *random == "" && set["seed"]:
		return usagef("--seed applies to --random")
	case *checkpoint == "" && set["tokenizer"]:
		return usagef("--tokenizer needs --checkpoint")
	case *checkpoint != "" && *tokPath == "":
		return usagef("--checkpoint needs --tokenizer")
	}
	if err := checkInputFile("--checkpoint", *checkpoint, 0); err != nil {
		return usageError{err: err}
	}
	if err := checkInputFile("--tokenizer", *tokPath, maxTokenizerBytes); err != nil {
		return usageError{err: err}
	}
	for _, in := range []string{*checkpoint, *tokPath} {
		if sameFile(in, *out) {
			return usagef("--out %s is the input file %s; converting would replace it", *out, in)
		}
	}
	mixQ4KM, mixQ5KM := strings.EqualFold(*typ, "q4_k_m"), strings.EqualFold(*typ, "q5_k_m")
	mixQ3KM := strings.EqualFold(*typ, "q3_k_m")
	dt := tensor.Q4_K
	var err error
	if !mixQ4KM && !mixQ5KM && !mixQ3KM {
		if dt, err = tensor.ParseDType(*typ); err != nil {
			return usagef("--type: %v", err)
		}
		if !slices.Contains(convert.Types(), dt) {
			return usagef("--type: cannot write %s weights (supported: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, q3_k_m, q4_k_m, q5_k_m)", dt)
		}
	}
	var m *convert.Model
	// A mapped input truncated mid-conversion faults on its next read;
	// guard turns that into an error naming it (Checkpoint.Guard).
	guard := func(f func() error) error { return f() }
	switch {
	case *random != "":
		shape, ok := convert.Shapes[*random]
		if !ok {
			return usagef("--random: unknown shape %q (known: %s)", *random, convert.ShapeNames())
		}
		// Streamed: the 1.1B shape is 4.4 GB of float32 weights, drawn
		// one tensor at a time as the file is written.
		if m, err = convert.RandomStream(shape, *seed); err != nil {
			return err
		}
	default:
		name, tok := embedded.Name, embedded.Tokenizer
		var c *llama2c.Checkpoint
		if *checkpoint == "" {
			c, err = llama2c.Parse(name, embedded.Checkpoint)
		} else {
			if tok, err = os.ReadFile(*tokPath); err != nil {
				return err
			}
			name = strings.TrimSuffix(filepath.Base(*checkpoint), filepath.Ext(*checkpoint))
			// Mapped, not read: a 7B checkpoint is 27 GB of float32, and
			// the writer needs one tensor of it at a time. Its errors
			// name the file.
			c, err = llama2c.Open(*checkpoint)
		}
		if err != nil {
			return err
		}
		defer c.Close()
		guard = c.Guard
		t, err := tokenizer.FromLlama2C(tok, c.Vocab)
		if err != nil {
			return inFile(*tokPath, err)
		}
		m = convert.FromLlama2C(name, c, t)
	}
	return writeOutput(*out, func(w io.Writer) error {
		return guard(func() error {
			switch {
			case mixQ4KM:
				return convert.WriteGGUFQ4KM(w, m)
			case mixQ5KM:
				return convert.WriteGGUFQ5KM(w, m)
			case mixQ3KM:
				return convert.WriteGGUFQ3KM(w, m)
			case dt == tensor.Q2_K:
				return convert.WriteGGUFQ2K(w, m)
			}
			return convert.WriteGGUF(w, m, dt)
		})
	})
}

// inFile names the input file an error is about; "" is the embedded
// model, whose errors need no name.
func inFile(path string, err error) error {
	if path == "" {
		return err
	}
	return fmt.Errorf("%s: %w", path, err)
}

// sameFile reports whether in and out name one existing file.
func sameFile(in, out string) bool {
	if in == "" {
		return false
	}
	a, err1 := os.Stat(in)
	b, err2 := os.Stat(out)
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}

// writeOutput writes the GGUF file at path.
//
// A symbolic link is written through: its target gets the file, and the
// link stays a link, as with cp or a shell's > (a dangling link names the
// file to create). Renaming a temporary file over the link itself, as a
// plain path gets, would replace it with a regular file and leave its
// target stale.
//
// An existing file that is not a regular one (/dev/null, /dev/stdout, a
// named pipe), directly or through links, is written to in place:
// renaming a temporary file over it, as writeFileAtomic does, would
// replace the device or pipe itself, and for root replace /dev/null with a
// multi-gigabyte file.
//
// SIGINT and SIGTERM stop the write at its next write call, at most a
// tensor later; writeFileAtomic then removes its temporary file, and the
// error says the conversion was interrupted. A second signal has its
// default effect at once, for a write that cannot return (to a pipe no one
// reads), and like SIGKILL leaves the temporary file, PATH.tmp-NNN, in
// the output's directory. Errors name path.
func writeOutput(path string, write func(io.Writer) error) error {
	target, err := followLinks(path)
	if err != nil {
		return err
	}
	name := path
	if target != path {
		name = fmt.Sprintf("%s (a link to %s)", path, target)
	}
	// Caught before the temporary file exists, so that no signal can
	// arrive between its creation and a handler that removes it.
	intr := catchInterrupts()
	defer intr.stop()
	fi, err := os.Stat(target)
	if err != nil || fi.Mode().IsRegular() {
		return writeFileAtomic(target, name, intr, write)
	}
	f, err := os.OpenFile(target, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("writing %s: %w", name, withoutPath(err))
	}
	conv, err := writeAll(f, intr, write)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	switch {
	case conv != nil:
		return conv
	case err == nil:
		return nil
	case intr.err() != nil:
		return fmt.Errorf("writing %s: %w; what it got is not a whole GGUF file", name, intr.err())
	}
	return fmt.Errorf("writing %s: %w", name, withoutPath(err))
}

// writeAll runs write into f and flushes what it buffered. A failure that
// is the converter's own (bad weights, say) comes back as conv, to be
// returned as it is, since it says what it is about; a failure of the
// file, or a caught signal, as err, for the caller to name the output in.
func writeAll(f *os.File, intr *interrupt, write func(io.Writer) error) (conv, err error) {
	bw := &errWriter{w: bufio.NewWriterSize(f, 1<<20), intr: intr}
	if werr := write(bw); werr != nil {
		switch {
		case errors.Is(werr, mmapfile.ErrChanged):
			// The input went away under a write straight from its
			// mapping (EFAULT): its fault, whatever the file said.
			return werr, nil
		case bw.err != nil:
			return nil, bw.err
		case intr.err() != nil:
			return nil, werr
		}
		return werr, nil
	}
	return nil, bw.w.Flush()
}

// maxLinks bounds followLinks, as the kernel bounds path resolution
// (Linux's MAXSYMLINKS), so that a loop of links is an error, not a hang.
const maxLinks = 40

// followLinks returns the file that the chain of symbolic links at path
// ends at, which need not exist yet; path itself when it is not a link. A
// relative link is resolved against the real directory that holds it, as
// the kernel does: lexically, "../x" from a directory reached through a
// link would name another file.
func followLinks(path string) (string, error) {
	p := path
	for range maxLinks {
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			return p, nil // absent or not a link: what is written
		}
		target, err := os.Readlink(p)
		if err != nil {
			return "", fmt.Errorf("writing %s: %w", path, withoutPath(err))
		}
		if !filepath.IsAbs(target) {
			dir, err := filepath.EvalSymlinks(filepath.Dir(p))
			if err != nil {
				return "", fmt.Errorf("writing %s: resolving the link %s: %w", path, p, withoutPath(err))
			}
			target = filepath.Join(dir, target)
		}
		p = target
	}
	return "", fmt.Errorf("writing %s: more than %d symbolic links to follow (a loop?)", path, maxLinks)
}

// writeFileAtomic writes through a temporary file in the same directory and
// renames it into place, so a failed or interrupted conversion never
// leaves a truncated model where a good one is expected. Its errors name
// the output as name, not the temporary file, which the user never asked
// for and which is gone by the time they read the message.
//
// The temporary file is named after the output, PATH.tmp-NNN, so that one
// a SIGKILL leaves behind is easy to recognise and remove.
func writeFileAtomic(path, name string, intr *interrupt, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", name, withoutPath(err))
	}
	defer os.Remove(f.Name())
	fail := func(err error) error {
		f.Close()
		if ierr := intr.err(); ierr != nil {
			// Whatever the write was doing when the signal came, the
			// signal is the reason it stopped.
			return fmt.Errorf("writing %s: %w; the unfinished file was removed", name, ierr)
		}
		return fmt.Errorf("writing %s: %w", name, withoutPath(err))
	}
	if conv, err := writeAll(f, intr, write); conv != nil {
		f.Close()
		return conv
	} else if err != nil {
		return fail(err)
	}
	if err := f.Chmod(0o644); err != nil {
		return fail(err)
	}
	// Synced before the rename, so a crash cannot leave the new name on
	// a file whose data never reached the disk.
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		return fail(err)
	}
	// The last moment a signal can still keep the old output: once
	// renamed, the conversion is complete and a signal changes nothing.
	if err := intr.err(); err != nil {
		return fail(err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}

// withoutPath drops the temporary file's name from an I/O error: "write
// /models/x.gguf.tmp-123: no space left on device" becomes "no space left
// on device".
func withoutPath(err error) error {
	if pe, ok := err.(*fs.PathError); ok {
		return pe.Err
	}
	return err
}

// errWriter remembers the first error of the writer under it, so that a
// failure the converter reports (wrapped as "gguf write: tensor ...") can
// still be told apart as the file's. It is also where a caught signal
// stops the conversion: the converter writes at least once a tensor, and
// gives up at the first write that fails.
type errWriter struct {
	w    *bufio.Writer
	intr *interrupt
	err  error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if err := e.intr.err(); err != nil {
		return 0, err
	}
	n, err := e.w.Write(p)
	if err != nil && e.err == nil {
		e.err = err
	}
	return n, err
}

// interrupted is the error of a write stopped by a signal.
type interrupted struct{ sig os.Signal }

func (e interrupted) Error() string {
	name := e.sig.String()
	switch e.sig {
	case os.Interrupt:
		name = "SIGINT"
	case syscall.SIGTERM:
		name = "SIGTERM"
	}
	return "interrupted by " + name
}

// interrupt catches SIGINT and SIGTERM while the output is written, so
// that the write can stop and clean up rather than die with a temporary
// file of up to the model's size left behind.
type interrupt struct {
	ch   chan os.Signal
	got  atomic.Pointer[os.Signal]
	done chan struct{}
}

func catchInterrupts() *interrupt {
	in := &interrupt{ch: make(chan os.Signal, 1), done: make(chan struct{})}
	signal.Notify(in.ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case sig := <-in.ch:
			in.got.Store(&sig)
			// Back to the default, so that a second signal ends a write
			// that cannot notice the first (blocked on a full pipe).
			signal.Stop(in.ch)
		case <-in.done:
		}
	}()
	return in
}

// err is an interrupted error once a signal has come, else nil.
func (in *interrupt) err() error {
	if sig := in.got.Load(); sig != nil {
		return interrupted{*sig}
	}
	return nil
}

// stop restores the signals' default effect and ends the goroutine
// waiting for them.
func (in *interrupt) stop() {
	signal.Stop(in.ch)
	close(in.done)
}
