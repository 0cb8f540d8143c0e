package sim

import (
	"sync"
	"time"
)

// pacer runs a Virtual against the wall clock: modelled time advances speed
// times faster than wall time, and one goroutine sleeps until the next event
// is due. This is all that differs between real mode and virtual mode; the
// engines are the same.
//
// To keep CPU low when steps are short (a 40 ms decode step is 2 ms of wall
// time at speed 20), the driver never sleeps less than minWake and then
// processes every event that has come due, several engine steps per wakeup.
type pacer struct {
	mu        sync.Mutex
	v         *Virtual
	speed     float64
	wallStart time.Time

	wake chan struct{}
	quit chan struct{}
	done chan struct{}
}

const minWake = time.Millisecond

func newPacer(v *Virtual, speed float64) *pacer {
	p := &pacer{
		v: v, speed: speed, wallStart: time.Now(),
		wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}),
	}
	go p.run()
	return p
}

// modelNow maps the wall clock to modelled time.
func (p *pacer) modelNow() time.Time {
	return Epoch.Add(time.Duration(float64(time.Since(p.wallStart)) * p.speed))
}

// wallUntil is how long until modelled time t on the wall clock.
func (p *pacer) wallUntil(t time.Time) time.Duration {
	at := p.wallStart.Add(time.Duration(float64(t.Sub(Epoch)) / p.speed))
	return time.Until(at)
}

// do runs fn with the Virtual caught up to now, then wakes the driver so it
// sees any event fn scheduled.
func (p *pacer) do(fn func(v *Virtual)) {
	p.mu.Lock()
	p.v.RunUntil(p.modelNow())
	fn(p.v)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// read runs fn under the lock without advancing the clock or waking the
// driver (stats for /metrics).
func (p *pacer) read(fn func(v *Virtual)) {
	p.mu.Lock()
	fn(p.v)
	p.mu.Unlock()
}

func (p *pacer) run() {
	defer close(p.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		p.mu.Lock()
		p.v.RunUntil(p.modelNow())
		next, ok := p.v.NextEvent()
		p.mu.Unlock()
		d := time.Hour
		if ok {
			d = max(p.wallUntil(next), minWake)
		}
		timer.Reset(d)
		select {
		case <-timer.C:
		case <-p.wake: // Reset above discards a stale fire (Go 1.23+ timers)
		case <-p.quit:
			return
		}
	}
}

func (p *pacer) close() {
	close(p.quit)
	<-p.done
}
