package kafkatransport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hymical/hymical/sdk/netguard"
	"github.com/hymical/hymical/sdk/transport"
)

// failure is what classify knows about a produce besides its error.
type failure struct {
	topic, brokers string
	// waited is how long the produce waited before it failed.
	waited time.Duration
	// connErr is the client's last failure to connect since the produce
	// began, if any: a produce that timed out because the guard refused
	// the leader's address, or the brokers refused the credentials, is
	// reported as that.
	connErr error
}

// permanentCodes are the broker's answers no retry can change until an
// operator acts. The client has already retried what Kafka calls
// retriable before the promise returns; any code not listed here is
// retryable, since keeping the message is what at-least-once asks for when
// in doubt.
var permanentCodes = map[*kerr.Error]string{
	// The client looked the topic up several times (UnknownTopicRetries)
	// before failing: like an AMQP exchange that is not declared, the
	// topic is the operator's to create, and the delivery is replayed then.
	kerr.UnknownTopicOrPartition:            "the topic does not exist and the brokers do not create it; create it, then replay the delivery",
	kerr.InvalidTopicException:              "the brokers refuse this topic name or it is internal; fix the endpoint's topic",
	kerr.TopicAuthorizationFailed:           "the plugin's user may not write to this topic; grant WRITE on it (kafka-acls) or fix the credentials",
	kerr.ClusterAuthorizationFailed:         "the plugin's user may not use the idempotent producer; grant IDEMPOTENT_WRITE on the cluster (kafka-acls)",
	kerr.TransactionalIDAuthorizationFailed: "the plugin's user lacks a permission the producer needs; grant it (kafka-acls)",
	kerr.SaslAuthenticationFailed:           "the brokers refused the sasl_username or sasl_password; fix the plugin's credentials",
	kerr.UnsupportedSaslMechanism:           "the brokers do not offer the plugin's sasl_mechanism; pick one they enable",
	kerr.IllegalSaslState:                   "the brokers refused the SASL exchange; check the plugin's sasl_mechanism",
	kerr.MessageTooLarge:                    "the message is larger than the topic accepts; raise the topic's max.message.bytes",
	kerr.RecordListTooLarge:                 "the message is larger than the topic accepts; raise the topic's max.message.bytes",
	kerr.InvalidRecord:                      "the brokers refused the record as it stands (a topic policy); see its text",
	kerr.PolicyViolation:                    "a broker policy refuses the record; see its text",
	kerr.InvalidRequiredAcks:                "the brokers refuse acks=all; report this",
	kerr.UnsupportedForMessageFormat:        "the topic's message format is too old for record headers; raise its message.format.version",
}

// hints for retryable codes worth a word.
var retryableHints = map[*kerr.Error]string{
	kerr.NotEnoughReplicas:            "fewer in-sync replicas than the topic's min.insync.replicas; it passes when replicas catch up",
	kerr.NotEnoughReplicasAfterAppend: "the write lost in-sync replicas after it was stored; it is sent again",
	kerr.LeaderNotAvailable:           "the partition is electing a leader",
	kerr.NotLeaderForPartition:        "the partition's leader moved",
	kerr.RequestTimedOut:              "the brokers did not replicate the write in time",
	kerr.ThrottlingQuotaExceeded:      "a broker quota throttles the plugin",
	kerr.BrokerNotAvailable:           "a broker is down",
	kerr.KafkaStorageError:            "a broker's log directory failed",
	kerr.NetworkException:             "the connection to a broker failed",
	kerr.OutOfOrderSequenceNumber:     "the idempotent producer lost its sequence; it starts a new one",
	kerr.UnknownProducerID:            "the brokers forgot the producer id; it starts a new one",
	kerr.InvalidProducerEpoch:         "the producer id was fenced; it starts a new one",
}

// classify decides what a failed produce means for the delivery, in one
// place.
func classify(err error, f failure) transport.Outcome {
	var refused *netguard.RefusedError
	var kafkaErr *kerr.Error
	var certErr *tls.CertificateVerificationError
	var netErr net.Error
	where := fmt.Sprintf("producing to topic %q on %s", f.topic, f.brokers)
	timedOut := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, kgo.ErrRecordTimeout) ||
		errors.As(err, &netErr) && netErr.Timeout()
	switch {
	case errors.As(err, &refused):
		return transport.Refused(refused.Error())
	case timedOut && errors.As(f.connErr, &refused):
		// Every dial was refused, so the produce could only time out:
		// the brokers' metadata names an address the guard refuses.
		return transport.Refused(fmt.Sprintf("%s: a broker advertises an address the plugin may not connect to: %s", where, refused.Error()))
	case timedOut && f.connErr != nil && !errors.Is(f.connErr, context.DeadlineExceeded):
		// Connecting failed (refused credentials, a certificate): that,
		// not the wait, is what the operator must see and fix.
		o := classify(f.connErr, failure{topic: f.topic, brokers: f.brokers, waited: f.waited})
		o.Error = fmt.Sprintf("no acknowledgement within %s: connecting failed: %s", f.waited.Round(time.Millisecond), o.Error)
		return o
	case errors.Is(err, errClosed), errors.Is(err, kgo.ErrClientClosed):
		return transport.Deferred(errClosed.Error())
	case errors.As(err, &kafkaErr):
		return fromCode(kafkaErr, fmt.Sprintf("%s: the brokers said %s", where, kafkaErr.Message))
	case errors.As(err, &certErr):
		return transport.Permanent(0, fmt.Sprintf("%s: a broker's TLS certificate does not verify (%v); give the plugin's tls_ca_file or fix the broker's certificate", where, certErr.Err))
	case timedOut:
		return transport.Retryable(0, fmt.Sprintf("%s: no acknowledgement within %s (brokers away, or the partition has no leader)", where, f.waited.Round(time.Millisecond)))
	case errors.Is(err, context.Canceled):
		return transport.Retryable(0, where+" abandoned: the attempt was cancelled")
	case errors.Is(err, kgo.ErrMaxBuffered):
		return transport.Retryable(0, where+": the plugin's buffer is full while the brokers are slow")
	}
	return transport.Retryable(0, fmt.Sprintf("%s failed: %v", where, err))
}

// fromCode applies permanentCodes to a broker's error code.
func fromCode(e *kerr.Error, what string) transport.Outcome {
	if hint, ok := permanentCodes[e]; ok {
		return transport.Permanent(0, what+"; "+hint)
	}
	if hint := retryableHints[e]; hint != "" {
		what += "; " + hint
	}
	return transport.Retryable(0, what)
}
