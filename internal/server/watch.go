package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/model"
)

// ModelCheckEvery is how often a running server checks that its model
// file was not written in place (model.Model.CheckFile): one fstat,
// nothing read.
const ModelCheckEvery = 2 * time.Second

// WatchModel checks m's file every interval (ModelCheckEvery when it is
// not positive), and sends the first failure
// of CheckFile on changed, which holds one value and is never closed. A
// server stops on it: its weights are mapped from the file, so they
// changed with it, and answers computed from them can no longer be
// trusted (the engine also checks before it reports a request done).
// stop ends the watch and returns once no check is running, so the model
// may then be closed.
func WatchModel(m *model.Model, every time.Duration) (changed <-chan error, stop func()) {
	if every <= 0 {
		every = ModelCheckEvery
	}
	ch := make(chan error, 1)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				if err := m.CheckFile(); err != nil {
					ch <- err
					return
				}
			}
		}
	}()
	var once sync.Once
	return ch, func() {
		once.Do(func() { close(quit) })
		wg.Wait()
	}
}

// AwaitStop waits for what ends a server's Run: its HTTP server stopping
// on its own (served, whose error it returns as err), ctx ending (a
// signal: drain as configured), or the model file changing (changed, from
// WatchModel: the error comes back as modelErr, logged, and drain becomes
// 0, since nothing in flight may finish on weights that changed).
func AwaitStop(ctx context.Context, served, changed <-chan error, log *slog.Logger, drain time.Duration) (err, modelErr error, drainFor time.Duration) {
	select {
	case err = <-served:
	case <-ctx.Done():
	case modelErr = <-changed:
		log.Error("stopping: the model file was modified under the server", "err", modelErr)
		drain = 0
	}
	return err, modelErr, drain
}
