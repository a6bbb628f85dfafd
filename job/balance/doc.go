// Package balance is the consumer-group balancer of assignment mode group:
// pure logic over the members' reports, tested on its own.
//
// A stage owns partition p of every raw topic, so Copartitioned assigns
// partition numbers, not topic partitions: a member gets partition p of all
// subscribed topics or of none, and a number missing from one topic is
// assigned to nobody. It is sticky, because a partition that moves costs a
// state restore: each member reports the partitions it owns in its join
// user data (a uvarint count, then uvarints; anything unreadable counts as
// owning nothing, which costs stickiness, not safety), keeps as many as its
// fair share allows, and only the rest are dealt out again. Shares differ
// by at most one partition; a partition two members claim (a zombie's stale
// report) goes to the first in member-ID order.
//
// Assigned turns a generation's assignment back into the partition numbers
// a member runs stages for.
package balance
