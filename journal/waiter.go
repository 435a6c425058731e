package journal

// waiter hears the answers about one idempotency key (see resolve) on c
// (cap 2). The waiters of a key form a list through next, headed in
// Journal.mu.waiters, so registering one allocates nothing beyond the
// waiter itself, which its owner may keep inside a larger record (a
// submission holds its own).
type waiter struct {
	c    chan applyResult
	next *waiter // the next waiter of the same key
}

// addWaiter registers w for the answers about key, with a channel from
// the journal's pool. Its owner reads w.c until it calls removeWaiter.
func (j *Journal) addWaiter(key [16]byte, w *waiter) {
	w.c, _ = j.waitChans.Get().(chan applyResult)
	if w.c == nil {
		w.c = make(chan applyResult, 2)
	}
	j.mu.Lock()
	w.next = j.mu.waiters[key]
	j.mu.waiters[key] = w
	j.nwaiters.Add(1)
	j.mu.Unlock()
}

// removeWaiter takes w out of key's list, unless a final answer (resolve,
// fail) took it out already, and returns its channel to the pool: answers
// are sent under j.mu to listed waiters only, so once w is out of the list
// nothing sends on w.c any more, and the answers left in it are dropped.
func (j *Journal) removeWaiter(key [16]byte, w *waiter) {
	j.mu.Lock()
	if head := j.mu.waiters[key]; head == w {
		if w.next == nil {
			delete(j.mu.waiters, key)
		} else {
			j.mu.waiters[key] = w.next
		}
		j.nwaiters.Add(-1)
	} else {
		for x := head; x != nil; x = x.next {
			if x.next == w {
				x.next = w.next
				j.nwaiters.Add(-1)
				break
			}
		}
	}
	j.mu.Unlock()
	w.next = nil
	for len(w.c) > 0 {
		<-w.c
	}
	j.waitChans.Put(w.c)
	w.c = nil
}

// takeWaiters removes key's list from the map (a final answer) and
// returns its head; j.mu is held.
func (j *Journal) takeWaiters(key [16]byte) *waiter {
	head := j.mu.waiters[key]
	if head == nil {
		return nil
	}
	delete(j.mu.waiters, key)
	n := int64(0)
	for w := head; w != nil; w = w.next {
		n++
	}
	j.nwaiters.Add(-n)
	return head
}
