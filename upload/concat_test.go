package upload

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestAssembliesPerTenant: a tenant assembles at most AssembliesPerTenant final uploads
// at once; its next creation waits for a place and goes on when one is given back,
// while another tenant's finds a place at once.
func TestAssembliesPerTenant(t *testing.T) {
	c := &Core{assemblies: newAssemblies(2)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	acme, rival := WithTenant(ctx, "acme"), WithTenant(ctx, "rival")
	take := func(ctx context.Context) func() {
		t.Helper()
		release, err := c.AssemblySlot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return release
	}
	first, _ := take(acme), take(acme)
	third := make(chan func(), 1)
	go func() {
		release, err := c.AssemblySlot(acme)
		if err != nil {
			t.Error(err)
		}
		third <- release
	}()
	take(rival)() // another tenant is not held up
	select {
	case <-third:
		t.Fatal("a third assembly of the tenant went ahead under a cap of 2")
	case <-time.After(100 * time.Millisecond):
	}
	first()
	first() // a release given twice frees one place
	select {
	case release := <-third:
		release()
	case <-ctx.Done():
		t.Fatal("the waiting assembly did not go ahead once a place was given back")
	}
	gone, stop := context.WithCancel(acme)
	stop()
	take(acme) // the second place again: the tenant is at its cap
	if _, err := c.AssemblySlot(gone); !errors.Is(err, context.Canceled) {
		t.Fatalf("a waiting creation whose client went away: %v, want context.Canceled", err)
	}
	if n := len(c.assemblies.held); n != 1 {
		t.Fatalf("%d tenants' places kept, want acme's alone (rival's are given back)", n)
	}
}
