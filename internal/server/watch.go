package server

import (
	"context"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/model"
)

// ModelCheckEvery is how often a running server checks that its model
// file was not written in place (model.Model.CheckFile): a stat, nothing
// read.
const ModelCheckEvery = 2 * time.Second

// WatchModel checks m's file every interval until ctx ends, and sends
// the first failure of CheckFile on the returned channel, which holds
// one value and is never closed. A server stops on it: its weights are
// mapped from the file, so they changed with it, and every answer
// computed from them from then on would be wrong.
func WatchModel(ctx context.Context, m *model.Model, every time.Duration) <-chan error {
	changed := make(chan error, 1)
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := m.CheckFile(); err != nil {
					changed <- err
					return
				}
			}
		}
	}()
	return changed
}
