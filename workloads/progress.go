package workloads

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/sys/unix"
)

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// StartProgress shows the progress of a run of total operations, read from
// live: a bar on a terminal, otherwise one line every interval, with the
// errors and ambiguous writes so far. It returns the function that stops it
// (after a final update). A nil w shows nothing.
func StartProgress(w io.Writer, name string, total int64, live *Live, interval time.Duration) (stop func()) {
	done := &live.Done
	if w == nil {
		return func() {}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	if IsTerminal(w) {
		p := mpb.New(mpb.WithOutput(w), mpb.WithWidth(40), mpb.WithRefreshRate(200*time.Millisecond))
		bar := p.AddBar(total,
			mpb.PrependDecorators(decor.Name(name+" "), decor.CountersNoUnit("%d / %d ops")),
			mpb.AppendDecorators(decor.Percentage(decor.WCSyncSpace), decor.Name(" "), decor.Elapsed(decor.ET_STYLE_GO),
				decor.Any(func(decor.Statistics) string {
					return fmt.Sprintf(" %d errors, %d ambiguous", live.Errors.Load(), live.Ambiguous.Load())
				})),
		)
		go func() {
			defer wg.Done()
			t := time.NewTicker(200 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-t.C:
					bar.SetCurrent(done.Load())
				case <-quit:
					if n := done.Load(); n >= total {
						bar.SetCurrent(total)
					} else {
						bar.SetCurrent(n)
						bar.Abort(false)
					}
					p.Wait()
					return
				}
			}
		}()
	} else {
		start := time.Now()
		go func() {
			defer wg.Done()
			t := time.NewTicker(interval)
			defer t.Stop()
			var last int64
			lastT := start
			for {
				select {
				case now := <-t.C:
					n := done.Load()
					rate := float64(n-last) / now.Sub(lastT).Seconds()
					fmt.Fprintf(w, "%s: %d/%d ops (%.0f%%), %.0f ops/s in the last %v, %d errors, %d ambiguous, elapsed %v\n",
						name, n, total, 100*float64(n)/float64(max(total, 1)), rate, now.Sub(lastT).Round(time.Millisecond),
						live.Errors.Load(), live.Ambiguous.Load(), now.Sub(start).Round(time.Second))
					last, lastT = n, now
				case <-quit:
					return
				}
			}
		}()
	}
	return func() {
		close(quit)
		wg.Wait()
	}
}
