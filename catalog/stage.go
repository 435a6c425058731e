package catalog

import (
	"io"
	"sync"
)

// Stage decodes an image body aside, with every check Load makes, and
// returns commit, which swaps the decoded content in as Load would (readers
// see the old tree or the new one; watchers are told to resync). Between
// Stage and commit the tree is untouched and goes on applying entries;
// commit replaces whatever it holds then. commit does its work once;
// later calls do nothing.
//
// A restore uses it to decode an image while the image is still being
// downloaded, and to make it live only once the file is verified and
// durable. A staged tree that is never committed is garbage like any other
// value.
func (t *Tree) Stage(r io.Reader) (commit func(), err error) {
	s, err := readImage(r, true)
	if err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { t.adopt(s) }) }, nil
}

// adopt makes s the tree's content.
func (t *Tree) adopt(s *state) {
	t.applyMu.Lock()
	defer t.applyMu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.s = s
	t.applying.Store(s.index)
	t.resyncAll(s.index)
	t.applied.Store(s.index)
}
