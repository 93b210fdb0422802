// The share scenario (KIP-932 share groups through franz-go's share consumer):
//
//	franz share <bootstrap host:port> <unique prefix>
//
// On a fresh topic <prefix>-share of 2 partitions and a fresh share group
// <prefix>-sg (share.auto.offset.reset=earliest, share.record.lock.duration.ms=15000):
//
//  1. produce 400 records, keys and values k0..k399 / v0..v399;
//  2. three members consume them (the second and third once member 0 holds its
//     record). Member 0 fetches in record_limit mode (at most 10
//     records a fetch, no prefetch) and holds one record for 18 s, renewing its lock
//     (ShareFetch/ShareAcknowledge v2 RENEW) every 6 s before accepting it; the
//     members release every value ending in 3 on its first delivery, reject every
//     value ending in 7, and accept the rest;
//  3. asserts that every value was accepted exactly once, except those ending in 7,
//     rejected exactly once; that released values came back with delivery count 2
//     and no other value came back (so the held record stayed locked past its 15 s
//     lock); that no acknowledgement was refused; that at least two members got
//     records;
//  4. kadm: the group is Stable with 3 members, each partition's lag is 0 (Kafka 4.4
//     may report a start offset short of the end then); after the members leave,
//     the group is deleted.
//
// Prints `OK franz-go share <version>`, or the failure on stderr and exits non-zero.
// The whole run is bounded to 150 s.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"skein/clients/internal/scen"
)

const (
	shareRecords = 400
	holdFor      = 18 * time.Second
	renewEvery   = 6 * time.Second
)

// shareLedger is what the members saw and did, shared between them.
type shareLedger struct {
	mu         sync.Mutex
	deliveries map[int][]int32 // value -> delivery counts seen, in order
	accepted   map[int]int
	rejected   map[int]int
	perMember  map[int]int
	ackErrors  []string
	held       int // the value member 0 held and renewed, -1 before
	holding    chan struct{} // closed once member 0 holds a record
	finished   chan struct{}
	once       sync.Once
}

func (l *shareLedger) done() int {
	return len(l.accepted) + len(l.rejected)
}

func shareScenario() {
	s = scen.StartWith("franz-go share", os.Args[2], os.Args[3], 150*time.Second)
	topic, group := s.Prefix+"-share", s.Prefix+"-sg"
	acl := newClient()
	defer acl.Close()
	adm := kadm.NewClient(acl)

	s.Step("create topic and set the group's configs")
	ctx, cancel := stepCtx()
	created, err := adm.CreateTopics(ctx, 2, 1, nil, topic)
	s.Check(err, "kadm.CreateTopics")
	s.Check(created[topic].Err, "kadm.CreateTopics "+topic)
	alter := kmsg.NewPtrIncrementalAlterConfigsRequest()
	resource := kmsg.NewIncrementalAlterConfigsRequestResource()
	resource.ResourceType, resource.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	for _, kv := range [][2]string{{"share.auto.offset.reset", "earliest"}, {"share.record.lock.duration.ms", "15000"}} {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Value = kv[0], kmsg.StringPtr(kv[1])
		resource.Configs = append(resource.Configs, c)
	}
	alter.Resources = append(alter.Resources, resource)
	altered, err := alter.RequestWith(ctx, acl)
	s.Check(err, "IncrementalAlterConfigs")
	for _, r := range altered.Resources {
		s.Check(kerr.ErrorForCode(r.ErrorCode), "IncrementalAlterConfigs on group "+r.ResourceName)
	}
	cancel()

	s.Step("produce")
	pcl := newClient(kgo.DefaultProduceTopic(topic))
	records := make([]*kgo.Record, 0, shareRecords)
	for i := 0; i < shareRecords; i++ {
		n := strconv.Itoa(i)
		records = append(records, &kgo.Record{Key: []byte("k" + n), Value: []byte("v" + n)})
	}
	ctx, cancel = stepCtx()
	s.Check(pcl.ProduceSync(ctx, records...).FirstErr(), "ProduceSync")
	cancel()
	pcl.Close()

	s.Step("three members share the records")
	ledger := &shareLedger{
		deliveries: map[int][]int32{}, accepted: map[int]int{}, rejected: map[int]int{},
		perMember: map[int]int{}, held: -1, holding: make(chan struct{}), finished: make(chan struct{}),
	}
	callback := func(_ *kgo.Client, results kgo.ShareAckResults) {
		ledger.mu.Lock()
		defer ledger.mu.Unlock()
		for _, r := range results {
			if r.Err != nil {
				ledger.ackErrors = append(ledger.ackErrors, fmt.Sprintf("%s/%d: %v", r.Topic, r.Partition, r.Err))
			}
		}
	}
	// Member 0 starts alone, so that it gets records to hold; the others join (a
	// client joins when it is made, and fetches ahead) once it holds one.
	members := make([]*kgo.Client, 3)
	var wg sync.WaitGroup
	for i := range members {
		if i == 1 {
			select {
			case <-ledger.holding:
			case <-time.After(30 * time.Second):
				s.Failf("member 0 got no record to hold within 30 s")
			}
		}
		opts := []kgo.Opt{kgo.ConsumeTopics(topic), kgo.ShareGroup(group), kgo.ShareAckCallback(callback),
			kgo.ClientID(fmt.Sprintf("%s-share-%d", s.Prefix, i))}
		if i == 0 {
			opts = append(opts, kgo.ShareMaxRecords(10), kgo.ShareMaxRecordsStrict())
		}
		cl := newClient(opts...)
		members[i] = cl
		wg.Add(1)
		go func() {
			defer wg.Done()
			shareMember(i, cl, ledger)
		}()
	}
	select {
	case <-ledger.finished:
	case <-time.After(100 * time.Second):
		ledger.mu.Lock()
		n := ledger.done()
		ledger.mu.Unlock()
		s.Failf("%d of %d values finished within 100 s", n, shareRecords)
	}
	// The members keep polling a little longer: nothing may come back.
	time.Sleep(2 * time.Second)

	s.Step("describe the group")
	ctx, cancel = stepCtx()
	described, err := adm.DescribeShareGroups(ctx, group)
	s.Check(err, "kadm.DescribeShareGroups")
	g := described[group]
	s.Check(g.Err, "DescribeShareGroups "+group)
	s.Assert(g.GroupState == "Stable" && len(g.Members) == 3, "group %s is %s with %d members, want Stable with 3",
		group, g.GroupState, len(g.Members))
	ends, err := adm.ListEndOffsets(ctx, topic)
	s.Check(err, "kadm.ListEndOffsets")
	offsets, err := adm.DescribeShareGroupOffsets(ctx, group)
	s.Check(err, "kadm.DescribeShareGroupOffsets")
	s.Check(offsets[group].Err, "DescribeShareGroupOffsets "+group)
	for p := int32(0); p < 2; p++ {
		o, ok := offsets[group].Offsets.Lookup(topic, p)
		end, _ := ends.Lookup(topic, p)
		s.Assert(ok, "DescribeShareGroupOffsets lacks %s/%d", topic, p)
		s.Check(o.Err, fmt.Sprintf("share offset of %s/%d", topic, p))
		if os.Getenv("SCENARIO_TRACE") != "" {
			fmt.Fprintf(os.Stderr, "%s/%d: start %d lag %d end %d held v%d\n", topic, p, o.StartOffset, o.Lag, end.Offset, ledger.held)
		}
		// Kafka 4.4 may report a start offset short of the end while the lag is 0.
		s.Assert(o.StartOffset <= end.Offset && o.Lag == 0, "%s/%d: start offset %d lag %d, want lag 0 (end %d)",
			topic, p, o.StartOffset, o.Lag, end.Offset)
	}
	cancel()

	s.Step("check what was delivered")
	close(stopMembers)
	wg.Wait()
	for _, cl := range members {
		cl.Close()
	}
	ledger.mu.Lock()
	s.Assert(len(ledger.ackErrors) == 0, "acknowledgements refused: %v", ledger.ackErrors)
	s.Assert(ledger.held >= 0, "member 0 held no record")
	busy := 0
	for _, n := range ledger.perMember {
		if n > 0 {
			busy++
		}
	}
	s.Assert(busy >= 2, "records went to %d members, want at least 2: %v", busy, ledger.perMember)
	for v := 0; v < shareRecords; v++ {
		seen := ledger.deliveries[v]
		switch {
		case v%10 == 7:
			s.Assert(ledger.rejected[v] == 1 && ledger.accepted[v] == 0 && slices.Equal(seen, []int32{1}),
				"v%d: rejected %d, accepted %d, deliveries %v; want rejected once at its first delivery",
				v, ledger.rejected[v], ledger.accepted[v], seen)
		case v%10 == 3:
			s.Assert(ledger.accepted[v] == 1 && slices.Equal(seen, []int32{1, 2}),
				"v%d: accepted %d, deliveries %v; want released at delivery 1 and accepted at 2",
				v, ledger.accepted[v], seen)
		default:
			s.Assert(ledger.accepted[v] == 1 && slices.Equal(seen, []int32{1}),
				"v%d (held: %v): accepted %d, deliveries %v; want accepted once at its first delivery",
				v, v == ledger.held, ledger.accepted[v], seen)
		}
	}
	ledger.mu.Unlock()

	s.Step("delete the group")
	ctx, cancel = stepCtx()
	deleted, err := adm.DeleteGroup(ctx, group)
	s.Check(err, "kadm.DeleteGroup")
	s.Check(deleted.Err, "DeleteGroup "+group)
	cancel()
	s.OK("github.com/twmb/franz-go")
}

var stopMembers = make(chan struct{})

// shareMember polls until the scenario stops it, acknowledging as the scenario says.
func shareMember(id int, cl *kgo.Client, l *shareLedger) {
	for {
		select {
		case <-stopMembers:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fetches := cl.PollFetches(ctx)
		cancel()
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				s.Failf("member %d: fetch error on %s/%d: %v", id, t, p, err)
			}
		})
		var hold *kgo.Record
		fetches.EachRecord(func(r *kgo.Record) {
			v, err := strconv.Atoi(string(r.Value[1:]))
			if err != nil || string(r.Key) != "k"+string(r.Value[1:]) {
				s.Failf("member %d: unexpected record %q=%q", id, r.Key, r.Value)
			}
			dc := r.DeliveryCount()
			l.mu.Lock()
			defer l.mu.Unlock()
			l.deliveries[v] = append(l.deliveries[v], dc)
			l.perMember[id]++
			switch {
			case v%10 == 7:
				r.Ack(kgo.AckReject)
				l.rejected[v]++
			case v%10 == 3 && dc == 1:
				r.Ack(kgo.AckRelease)
			case id == 0 && l.held < 0 && hold == nil:
				hold = r
				l.held = v
			default:
				r.Ack(kgo.AckAccept)
				l.accepted[v]++
			}
		})
		flush(id, cl)
		if hold != nil {
			close(l.holding)
			// Held past its 15 s lock, renewed every 6 s: no other member may get it.
			for held := time.Duration(0); held < holdFor; held += renewEvery {
				time.Sleep(renewEvery)
				hold.Ack(kgo.AckRenew)
				flush(id, cl)
			}
			hold.Ack(kgo.AckAccept)
			flush(id, cl)
			l.mu.Lock()
			l.accepted[l.held]++
			l.mu.Unlock()
		}
		l.mu.Lock()
		if l.done() == shareRecords {
			l.once.Do(func() { close(l.finished) })
		}
		l.mu.Unlock()
	}
}

func flush(id int, cl *kgo.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.FlushAcks(ctx); err != nil {
		s.Failf("member %d: FlushAcks: %v", id, err)
	}
}
