package bufpool

import "testing"

// TestBufferPoolClasses checks the pool's size classes (four per doubling): a buffer
// comes back with its class's capacity (at most a quarter more than asked for; over
// the largest class, or over the cap asked for, it is allocated to size), and only a
// buffer of a class's exact capacity is taken back.
func TestBufferPoolClasses(t *testing.T) {
	p := New(16, 30)
	for _, c := range []struct{ n, want int }{
		{40 << 10, 64 << 10}, {64 << 10, 64 << 10}, {64<<10 + 1, 80 << 10}, {100 << 10, 112 << 10},
		{120 << 10, 128 << 10}, {5 << 20, 5 << 20}, {5<<20 + 1, 6 << 20}, {8 << 20, 8 << 20},
		{8<<20 + 77, 10 << 20}, {20 << 20, 20 << 20}, {64 << 20, 64 << 20},
	} {
		b := p.Get(c.n)
		if len(b) != c.n || cap(b) != c.want || p.SizeFor(c.n, 0) != c.want {
			t.Errorf("get(%d): len %d cap %d, want cap %d", c.n, len(b), cap(b), c.want)
		}
		if got := p.size(p.class(c.want)); got != c.want {
			t.Errorf("class of %d has size %d", c.want, got)
		}
		p.Put(b)
	}
	for n := 1 << 16; n <= 1<<30; n += n/7 + 4093 {
		if size := p.SizeFor(n, 0); size < n || size > n+n/4 {
			t.Fatalf("sizeFor(%d) = %d: not within a quarter over", n, size)
		}
	}
	if b := p.GetWithin(64<<20+1, 64<<20+64<<10); cap(b) != 64<<20+1 {
		t.Fatalf("getWithin over the cap asked for has cap %d", cap(b))
	}
	if huge := New(16, 20).Get(1<<20 + 1); cap(huge) != 1<<20+1 {
		t.Fatalf("a buffer over the largest class has cap %d", cap(huge))
	}
	p.Put(make([]byte, 100<<10)) // not a class's capacity: ignored
}

// TestPointers checks that buffers lent by pointer have the length asked for and their
// class's capacity, and that a buffer given back is lent again as it is (not cleared:
// its borrower overwrites it) with the length asked for the next time.
func TestPointers(t *testing.T) {
	q := New(8, 16).Pointers()
	for _, c := range []struct{ n, want int }{{16 << 10, 16 << 10}, {5000, 5120}, {100, 100}, {70 << 10, 70 << 10}} {
		b := q.Get(c.n)
		if len(*b) != c.n || cap(*b) != c.want {
			t.Errorf("Get(%d): len %d cap %d, want cap %d", c.n, len(*b), cap(*b), c.want)
		}
		q.Put(b)
	}
	// sync.Pool may drop what it holds at any time (and does at random under -race), so
	// a buffer is looked for over a few rounds.
	for range 100 {
		b := q.Get(16 << 10)
		(*b)[0] = 0xAB
		q.Put(b)
		again := q.Get(16<<10 - 100) // the same class
		if again == b {
			if len(*again) != 16<<10-100 || (*again)[0] != 0xAB {
				t.Fatalf("a buffer lent again has len %d and first byte %#x, want %d and 0xab", len(*again), (*again)[0], 16<<10-100)
			}
			return
		}
		q.Put(again)
	}
	t.Fatal("no buffer given back was lent again in 100 rounds")
}
