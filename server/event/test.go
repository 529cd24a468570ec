package event

import (
	"fmt"
	"time"

	"github.com/hymical/hymical/storage"
)

// TypeTest is the type of the event POST /v1/endpoints/{id}/test sends.
const TypeTest = TypePrefix + "test"

// Test builds the hymical.test event for the endpoint endpointID alone:
//
//	{"type":"hymical.test","event":{"id":…,"endpoint_id":…,"test":true,"created_at":…}}
//
// It is shaped like an event from outside (Generic), with its id under
// event.id, so a receiver's dedupe on that id works for it too; "test"
// lets a receiver tell it from real traffic without knowing the type.
func Test(endpointID string, now time.Time) (storage.Event, error) {
	if endpointID == "" {
		return storage.Event{}, fmt.Errorf("%w: a test event needs the endpoint it is for", storage.ErrInvalid)
	}
	id := storage.NewID("evt")
	body := newObject().
		str("type", TypeTest).
		raw("event", newObject().
			str("id", id).
			str("endpoint_id", endpointID).
			raw("test", []byte("true")).
			str("created_at", stamp(now)).
			bytes()).
		bytes()
	return storage.Event{ID: id, Type: TypeTest, EndpointID: endpointID, Payload: body, CreatedAt: now}, nil
}
