package ratelimit

import (
	"testing"
	"time"
)

func TestAllowOncePerIntervalCountingTheRest(t *testing.T) {
	var l Log
	t0 := time.Unix(1000, 0)
	if ok, n := l.Allow(t0); !ok || n != 0 {
		t.Fatalf("first warning: %v %d, want true 0", ok, n)
	}
	for i := 1; i <= 3; i++ {
		if ok, _ := l.Allow(t0.Add(time.Duration(i) * time.Second)); ok {
			t.Fatalf("warning %d within the interval was allowed", i)
		}
	}
	if ok, n := l.Allow(t0.Add(Every)); !ok || n != 3 {
		t.Fatalf("after the interval: %v %d, want true 3", ok, n)
	}
}
