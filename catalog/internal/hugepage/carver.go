package hugepage

// A Carver hands out arrays of one size carved from groups that Make
// makes: a table that grows piece by piece (a slab, an id page, an arena
// chunk) gets its pieces side by side in huge pages once it is large,
// without making one array for all of it. The groups double with the
// number of pieces handed out, from one piece up to a maximum, so that a
// small table stays small and a large one wastes at most a group.
//
// The zero Carver is ready to use. It is not safe for concurrent use.
type Carver[T any] struct {
	spare []T
	made  int
}

// Next returns a zero array of size Ts, its capacity size, from a group of
// at most maxGroup arrays.
func (c *Carver[T]) Next(size, maxGroup int) []T {
	if len(c.spare) < size {
		c.spare = Make[T](size * min(max(c.made, 1), maxGroup))
	}
	a := c.spare[:size:size]
	c.spare = c.spare[size:]
	c.made++
	return a
}
