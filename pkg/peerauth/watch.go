package peerauth

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// reloadDelay gathers the events of one change of the token file (an
// editor's write and rename, Kubernetes swapping a secret's symlink) into
// one reload.
const reloadDelay = 100 * time.Millisecond

// Watch reloads the token file whenever its directory changes, until ctx
// is done; a file that no longer reads is logged and the tokens read
// before stay in force. It watches the directory, not the file, so that a
// file replaced by a rename (or a Kubernetes secret's symlink swap) is
// seen. Without a token file it returns nil at once.
func (a *Authenticator) Watch(ctx context.Context) error {
	if a.opts.TokenFile == "" {
		return nil
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	dir := filepath.Dir(a.opts.TokenFile)
	if err := fw.Add(dir); err != nil {
		fw.Close()
		return fmt.Errorf("token file: watch %s: %w", dir, err)
	}
	go func() {
		defer fw.Close()
		delay := time.NewTimer(time.Hour)
		delay.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-fw.Events:
				if !ok {
					return
				}
				if ev.Op != fsnotify.Chmod {
					delay.Reset(reloadDelay)
				}
			case err, ok := <-fw.Errors:
				if !ok {
					return
				}
				a.opts.Logger.Warn("token file watch error", "file", a.opts.TokenFile, "error", err.Error())
			case <-delay.C:
				if err := a.Reload(); err != nil {
					a.opts.Logger.Error("token file not reloaded; the tokens read before stay in force", "error", err.Error())
				}
			}
		}
	}()
	return nil
}
