package job_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
)

// offsetCommit is what one TxnOffsetCommit request for the job's group
// carried, as the broker received it.
type offsetCommit struct {
	version    int16
	member     string
	generation int32
	instance   string
}

// groupWatch records at the embedded broker the TxnOffsetCommit requests
// for one group and the (member, generation) pairs its members synced,
// i.e. the generations each member really joined.
type groupWatch struct {
	mu      sync.Mutex
	commits []offsetCommit
	synced  map[string]map[int32]bool
}

// watchGroup starts recording on e's embedded cluster; kfake still answers
// every request itself.
func (e *env) watchGroup(group string) *groupWatch {
	w := &groupWatch{synced: map[string]map[int32]bool{}}
	e.cluster.ControlKey(int16(kmsg.TxnOffsetCommit), func(r kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		req := r.(*kmsg.TxnOffsetCommitRequest)
		if req.Group != group {
			return nil, nil, false // the route steps' group
		}
		c := offsetCommit{version: req.GetVersion(), member: req.MemberID, generation: req.Generation}
		if req.InstanceID != nil {
			c.instance = *req.InstanceID
		}
		w.mu.Lock()
		w.commits = append(w.commits, c)
		w.mu.Unlock()
		return nil, nil, false
	})
	e.cluster.ControlKey(int16(kmsg.SyncGroup), func(r kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		req := r.(*kmsg.SyncGroupRequest)
		if req.Group != group {
			return nil, nil, false
		}
		w.mu.Lock()
		if w.synced[req.MemberID] == nil {
			w.synced[req.MemberID] = map[int32]bool{}
		}
		w.synced[req.MemberID][req.Generation] = true
		w.mu.Unlock()
		return nil, nil, false
	})
	return w
}

// TestGroupTxnOffsetCommitMembership checks at the broker that in
// assignment mode group every TxnOffsetCommit of the job's group names the
// member and the generation it serves, so the coordinator can fence the
// commit of a stale generation: a non-empty member id and a generation
// that member synced (it joined it), across a rebalance that moves the
// generation on. In static mode the commit carries no membership: member
// id "", generation -1, no instance id (sink.Group's documented values).
func TestGroupTxnOffsetCommitMembership(t *testing.T) {
	kafkatest.SkipExternal(t, "reads the requests at the embedded broker")

	t.Run("group", func(t *testing.T) {
		e := newEnv(t)
		watch := e.watchGroup(e.jobID)
		w := e.workload(21, 2_500, 600)
		chunks := slices.Collect(slices.Chunk(w.Records, 500))
		half := len(chunks) / 2

		a := e.start(e.groupConfig("a"))
		e.waitAssigned(30*time.Second, a)
		for _, c := range chunks[:half] {
			e.produce(c)
		}
		e.waitCommitted(a, 0.5, 60*time.Second)

		b := e.start(e.groupConfig("b")) // a rebalance: a new generation
		e.waitAssigned(45*time.Second, a, b)
		for _, c := range chunks[half:] {
			e.produce(c)
		}
		e.waitCommitted(b, 1, 60*time.Second)
		e.stop(a)
		e.stop(b)
		e.verify(w, sum(a.job.Stats(), b.job.Stats()))

		watch.mu.Lock()
		defer watch.mu.Unlock()
		if len(watch.synced) < 2 {
			t.Fatalf("the broker saw %d members sync group %s, want the 2 instances: %v", len(watch.synced), e.jobID, watch.synced)
		}
		members, generations := map[string]bool{}, map[int32]bool{}
		for i, c := range watch.commits {
			if t.Failed() && i >= 5 {
				t.Errorf("... %d TxnOffsetCommits checked", len(watch.commits))
				break
			}
			switch {
			case c.member == "":
				t.Errorf("TxnOffsetCommit %d (v%d) carries no member id (generation %d): the coordinator cannot fence a stale generation", i, c.version, c.generation)
			case c.generation <= 0:
				t.Errorf("TxnOffsetCommit %d (v%d) of member %s carries generation %d, want the generation it joined (>0)", i, c.version, c.member, c.generation)
			case !watch.synced[c.member][c.generation]:
				t.Errorf("TxnOffsetCommit %d (v%d) of member %s carries generation %d, which that member never joined (it synced %v)", i, c.version, c.member, c.generation, watch.synced[c.member])
			}
			members[c.member], generations[c.generation] = true, true
		}
		t.Logf("%d TxnOffsetCommits from members %v in generations %v; synced %v", len(watch.commits), keys(members), keys(generations), watch.synced)
		// a committed alone in its first generation, then both in the
		// generation b's join made: the field must follow the group.
		if len(watch.commits) == 0 || len(members) < 2 || len(generations) < 2 {
			t.Errorf("%d TxnOffsetCommits from %d members in %d generations, want both instances' commits in at least 2 generations: members %v, generations %v",
				len(watch.commits), len(members), len(generations), keys(members), keys(generations))
		}
	})

	t.Run("static", func(t *testing.T) {
		e := newEnv(t)
		watch := e.watchGroup(e.jobID)
		w := e.workload(22, 1_500, 300)
		r := e.start(e.config("0, 1, 2, 3"))
		e.produce(w.Records)
		e.waitCommitted(r, 1, 60*time.Second)
		e.stop(r)
		e.verify(w, r.job.Stats())

		watch.mu.Lock()
		defer watch.mu.Unlock()
		if len(watch.commits) == 0 {
			t.Fatal("the broker saw no TxnOffsetCommit for the job's group")
		}
		if len(watch.synced) != 0 {
			t.Errorf("a static job synced group %s: %v", e.jobID, watch.synced)
		}
		for i, c := range watch.commits {
			if c.member != "" || c.generation != -1 || c.instance != "" {
				t.Errorf("TxnOffsetCommit %d (v%d): member %q, generation %d, instance %q; want \"\", -1, \"\" in static mode",
					i, c.version, c.member, c.generation, c.instance)
			}
		}
	})
}

// keys returns m's keys, sorted, for messages.
func keys[K string | int32](m map[K]bool) []string {
	var s []string
	for k := range m {
		s = append(s, fmt.Sprint(k))
	}
	slices.Sort(s)
	return s
}
