package journal

import "time"

// The data dir's free space is watched by a journal/internal/diskguard
// Guard (j.space): it refuses writes under Config.ReserveBytes and keeps
// the emergency ballast. The no-space alarm it drives is in nospace.go.

// watchSpace runs the guard every Config.SpaceCheckInterval until Close.
func (j *Journal) watchSpace() { j.every(j.cfg.SpaceCheckInterval, j.checkSpace) }

// every calls f every d on the journal's clock until the journal stops.
func (j *Journal) every(d time.Duration, f func()) {
	tick, stop := j.cfg.Clock.NewTicker(d)
	defer stop()
	for {
		select {
		case <-j.stopc:
			return
		case <-tick:
			f()
		}
	}
}
