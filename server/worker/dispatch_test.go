package worker

import (
	"slices"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

func claimsOf(endpoints ...string) []queued {
	out := make([]queued, len(endpoints))
	for i, id := range endpoints {
		out[i] = queued{claim: storage.Claim{Delivery: storage.Delivery{ID: id + "_" + string(rune('a'+i)), EndpointID: id}}}
	}
	return out
}

// takeAll takes claims while one may start, and returns their endpoints in
// the order taken.
func takeAll(d *dispatch) []string {
	var got []string
	for d.next() >= 0 {
		q, _ := d.take()
		got = append(got, q.claim.Delivery.EndpointID)
	}
	return got
}

func TestDispatchOrder(t *testing.T) {
	cases := []struct {
		name   string
		shared int
		// steps alternate: claims added, then the endpoints taken until
		// none may start, with done called for those in done first.
		add  [][]string
		done [][]string
		want [][]string
		// took is each endpoint's last send (none: not known).
		took map[string]time.Duration
	}{{
		name:   "the endpoint with fewest in flight goes first, then in turn",
		shared: 10,
		add:    [][]string{{"a", "a", "a", "b", "b", "c"}},
		done:   [][]string{nil},
		want:   [][]string{{"a", "b", "c", "a", "b", "a"}},
	}, {
		name:   "past shared in flight, a backlog waits and a newcomer goes",
		shared: 2,
		add:    [][]string{{"a", "a", "a", "a"}, {"b"}, {"c", "c"}, nil},
		done:   [][]string{nil, nil, nil, {"a", "b"}},
		// a fills shared; b holds nothing else and takes the reserve; c
		// has two waiting, so it is a backlog; once a and b are done,
		// busy is below shared again and c, with none in flight, goes
		// before a.
		want: [][]string{{"a", "a"}, {"b"}, nil, {"c"}},
	}, {
		name:   "an endpoint that drops to none in flight but has a backlog does not take the reserve",
		shared: 2,
		add:    [][]string{{"a", "a", "a", "b", "b"}, {"c"}, nil, nil},
		done:   [][]string{nil, nil, {"a"}, {"c"}},
		// a and b fill shared, c takes the reserve; a's send ends, but
		// with two more waiting it is a backlog and waits until fewer
		// than shared are in flight.
		want: [][]string{{"a", "b"}, {"c"}, nil, {"a"}},
	}, {
		name:   "past shared, a backlog that is light work at its pace takes the reserve, one at a time",
		shared: 2,
		took:   map[string]time.Duration{"a": 600 * time.Millisecond, "b": 600 * time.Millisecond, "q": 2 * time.Millisecond},
		add:    [][]string{{"a", "a", "b", "b"}, {"q", "q", "q"}, nil, nil, nil},
		done:   [][]string{nil, nil, {"q"}, {"a"}, {"q"}},
		// a and b fill shared, and their next claims are 600 ms each:
		// no reserve for them. q's three are 6 ms at its pace: it takes
		// the reserve, one in flight at a time. a's send ends while q's
		// is in flight, two in all: a waits the moment q's takes, then
		// goes within shared, and q's last takes the reserve again.
		want: [][]string{{"a", "b"}, {"q"}, {"q"}, nil, {"a", "q"}},
	}, {
		name:   "past shared, one claim of an endpoint whose last send took long is not light",
		shared: 1,
		took:   map[string]time.Duration{"h": time.Second, "q": 2 * time.Millisecond},
		add:    [][]string{{"a"}, {"h"}, {"q"}},
		done:   [][]string{nil, nil, nil},
		// h's last send hung until the read timeout: its one claim is a
		// second of a sender, so it waits for a shared one; q's is light.
		want: [][]string{{"a"}, nil, {"q"}},
	}, {
		name:   "an endpoint whose pace is not known yet has light work only in one claim",
		shared: 1,
		add:    [][]string{{"a"}, {"n", "n"}},
		done:   [][]string{nil, nil},
		want:   [][]string{{"a"}, nil},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := newDispatch(tc.shared, func(id string) time.Duration { return tc.took[id] })
			for i := range tc.add {
				for _, id := range tc.done[i] {
					d.done(id)
				}
				d.add(claimsOf(tc.add[i]...))
				if got := takeAll(d); !slices.Equal(got, tc.want[i]) {
					t.Fatalf("step %d: took %v, want %v", i, got, tc.want[i])
				}
			}
		})
	}
}

func TestDispatchClosedHandsOutWhatIsLeft(t *testing.T) {
	d := newDispatch(1, nil)
	d.add(claimsOf("a", "a", "a"))
	if q, ok := d.take(); !ok || q.claim.Delivery.EndpointID != "a" {
		t.Fatalf("first take: %v, %v", q, ok)
	}
	d.close()
	// Past shared and with a in flight, nothing may start until closed:
	// then what is left goes, to be given back, and take reports the end.
	for i := range 2 {
		if _, ok := d.take(); !ok {
			t.Fatalf("take %d after close found nothing; two claims were left", i+2)
		}
	}
	if _, ok := d.take(); ok {
		t.Fatal("take after close handed out a claim that was not there")
	}
}
