package transport

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// okPlugin answers every send delivered at once.
type okPlugin struct{}

func (okPlugin) Configure(context.Context, Settings) error { return nil }
func (okPlugin) Validate(context.Context, Endpoint) error  { return nil }
func (okPlugin) Send(context.Context, Message) Outcome     { return Delivered(200) }

// BenchmarkSendRPC measures both shims of one send, in one process over
// loopback gRPC, for each protocol: what the boundary costs apart from the
// second process (server/pluginhost's BenchmarkSend has that). Run it with
// -benchmem: every allocation here is one the plugin or the host pays per
// message.
func BenchmarkSendRPC(b *testing.B) {
	msg := Message{
		DeliveryID: "dlv_0123456789abcdef0123456789abcdef",
		Attempt:    1,
		Endpoint:   Endpoint{URL: "http://127.0.0.1:8080/hooks"},
		Headers: []Header{
			{Name: "webhook-id", Value: "dlv_0123456789abcdef0123456789abcdef"},
			{Name: "webhook-timestamp", Value: "1700000000"},
			{Name: "webhook-signature", Value: "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4="},
		},
		Body: []byte(`{"type":"submission.received","submission":{"id":"sub_48984534f33749c49a88de2d59400dce"}}`),
	}
	for v := 1; v <= ProtocolVersion; v++ {
		b.Run(fmt.Sprintf("protocol=%d", v), func(b *testing.B) {
			c, _ := connect(b, okPlugin{}, v)
			b.SetParallelism(8)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					m := msg
					m.Deadline = time.Now().Add(10 * time.Second)
					if _, err := c.SendRPC(context.Background(), m); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
