// Package consistency tallies the journal's consistency checks: at each
// check mark, the state digest of this member ([Checker.RecordMark]) and
// the digests the voters report ([Checker.Tally]). Once a majority of the
// voters agree on a digest it compares this member's with it (a
// [*CorruptError] when they differ) and raises the cluster's [Alarm]
// naming the voters that differ; once no digest can reach a majority, it
// raises the alarm that refuses writes ([Checker.WriteRefusal]) until a
// clear entry applies ([Checker.Clear]). It also holds the check at start
// ([Checker.StartPending]): a member's loaded state is confirmed by the
// first comparison at a mark after it. Package journal exports the error
// and the alarm as journal.CorruptError and journal.Alarm; the running
// journal's applier and the offline replay (journal/offline) decide alike
// because both tally through a Checker.
//
// A Checker is changed by one goroutine, its owner (the journal's
// applier, or the offline replay); its readers (Current, WriteRefusal,
// Pending, Count) are safe to call from any goroutine. The package starts
// no goroutine.
package consistency
