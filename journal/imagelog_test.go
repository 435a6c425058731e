package journal_test

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
)

// TestJournalLeavesTransportAndImageCallsToTheirOwnValues: the calls only a
// transport (Receiver) or an image checkpointer (ImageLog's recording
// calls) makes are not methods of *Journal, whose method set is the user's
// API; the values that carry them have them.
func TestJournalLeavesTransportAndImageCallsToTheirOwnValues(t *testing.T) {
	jt := reflect.TypeFor[*journal.Journal]()
	internal := []string{"ImageWritten", "MembershipAt"}
	recv := reflect.TypeFor[journal.Receiver]()
	for i := range recv.NumMethod() {
		internal = append(internal, recv.Method(i).Name)
	}
	for _, name := range internal {
		_, ok := jt.MethodByName(name)
		require.False(t, ok, "*journal.Journal has %s", name)
	}
	lt := reflect.TypeFor[*journal.ImageLog]()
	for _, name := range []string{"ReadEntries", "TermAt", "FirstIndex", "ImageWritten", "MembershipAt"} {
		_, ok := lt.MethodByName(name)
		require.True(t, ok, "*journal.ImageLog lacks %s", name)
	}
}
