package idset

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestSetAgainstMap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var s Set
	ref := map[uint32]bool{}
	next := uint32(1)
	for i := 0; i < 200000; i++ {
		switch r.IntN(4) {
		case 0, 1: // append a fresh, growing id
			if !s.Add(next) {
				t.Fatalf("Add(%d) of a new id reported present", next)
			}
			ref[next] = true
			next++
		case 2: // add an arbitrary id below the counter
			id := r.Uint32N(next)
			if got, want := s.Add(id), !ref[id]; got != want {
				t.Fatalf("Add(%d) = %v, want %v", id, got, want)
			}
			ref[id] = true
		case 3:
			id := r.Uint32N(next + 10)
			if got, want := s.Remove(id), ref[id]; got != want {
				t.Fatalf("Remove(%d) = %v, want %v", id, got, want)
			}
			delete(ref, id)
		}
	}
	want := make([]uint32, 0, len(ref))
	for id := range ref {
		want = append(want, id)
	}
	slices.Sort(want)
	got := s.AppendTo(nil)
	if !slices.Equal(got, want) || s.Len() != len(want) {
		t.Fatalf("set has %d ids (Len %d), want %d", len(got), s.Len(), len(want))
	}
	var ranged []uint32
	if !s.Range(func(id uint32) bool { ranged = append(ranged, id); return true }) || !slices.Equal(ranged, want) {
		t.Fatalf("Range saw %d ids, want %d in order", len(ranged), len(want))
	}
	seen := 0
	if s.Range(func(uint32) bool { seen++; return seen < 10 }) || seen != 10 {
		t.Fatalf("Range stopped by fn reported completion or saw %d ids, want 10", seen)
	}
	for _, id := range want[:100] {
		if !s.Contains(id) {
			t.Fatalf("Contains(%d) = false", id)
		}
	}
	if s.Contains(next + 100) {
		t.Fatal("Contains of an absent id")
	}
}
