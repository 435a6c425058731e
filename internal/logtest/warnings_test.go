package logtest

import (
	"log/slog"
	"testing"
)

func TestWarningsKeepsWarnAndAbove(t *testing.T) {
	w := &Warnings{}
	l := slog.New(w)
	l.Info("slow thing")
	l.Warn("slow thing took 2s")
	l.Error("slow thing failed")
	if got := w.Count("slow thing"); got != 2 {
		t.Fatalf("Count = %d, want 2 (info is not kept)", got)
	}
}
