// Command bench-go measures the official Go client (go-liftbridge) for the
// liftbridge-nats benchmark suite. The Python suite starts the servers and
// creates the streams; this program only publishes or reads and prints one
// JSON object with what it measured.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	lift "github.com/liftbridge-io/go-liftbridge/v2"
)

type result struct {
	Mode       string  `json:"mode"`
	Count      int     `json:"count"`
	Errors     int64   `json:"errors"`
	Seconds    float64 `json:"seconds"`
	Rate       float64 `json:"rate"`
	CPUSeconds float64 `json:"cpu_seconds"`
	CPUPerMsg  float64 `json:"cpu_us_per_msg"`
	MaxRSSKiB  int64   `json:"max_rss_kib"`
	Threads    int64   `json:"threads,omitempty"`
	Resubs     int64   `json:"resubscribes,omitempty"`
	GoVersion  string  `json:"go_version,omitempty"`
	// End-to-end modes: the latencies (µs) of the timed messages a reader saw, and the
	// rate a paced publisher really sent at.
	SamplesUS []int64 `json:"samples_us,omitempty"`
	SendRate  float64 `json:"achieved_send_rate,omitempty"`
	Error     string  `json:"error,omitempty"`
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// maxRSS reads the peak resident size from /proc: getrusage's Maxrss would include
// the parent's, which Linux carries into a child across fork and exec.
func maxRSS() int64 {
	return status("VmHWM:")
}

// status reads a number from /proc/self/status (kB figures in KiB), -1 when absent.
func status(field string) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, field) {
			var n int64
			fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(line, field)), "%d", &n)
			return n
		}
	}
	return -1
}

// fanout reads count messages from each of partitions partitions, one
// subscription (and goroutine) each, and samples the process's thread count. A
// stream that fails is subscribed to again after its last message, as an
// application would (grpc-go sometimes reports a flow-control overrun on many
// streams); resubscribes counts those.
func fanout(ctx context.Context, c lift.Client, stream string, partitions, count int, peak, resubscribes *int64) (int64, error) {
	done := make(chan error, partitions)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sample := func() {
		n := status("Threads:")
		for {
			old := atomic.LoadInt64(peak)
			if n <= old || atomic.CompareAndSwapInt64(peak, old, n) {
				return
			}
		}
	}
	// Sampled at the start and at the end as well: a short read can finish before the
	// sampling goroutine first runs.
	sample()
	defer sample()
	go func() {
		for ctx.Err() == nil {
			sample()
			time.Sleep(50 * time.Millisecond)
		}
	}()
	seen := make([]int64, partitions)
	finished := make([]sync.Once, partitions)
	var subscribe func(p int) error
	subscribe = func(p int) error {
		opts := []lift.SubscriptionOption{lift.Partition(int32(p))}
		if next := atomic.LoadInt64(&seen[p]); next > 0 {
			opts = append(opts, lift.StartAtOffset(next))
		} else {
			opts = append(opts, lift.StartAtEarliestReceived())
		}
		return c.Subscribe(ctx, stream, func(msg *lift.Message, err error) {
			if err != nil {
				if ctx.Err() == nil && atomic.LoadInt64(&seen[p]) < int64(count) {
					atomic.AddInt64(resubscribes, 1)
					go func() {
						if err := subscribe(p); err != nil {
							finished[p].Do(func() { done <- err })
						}
					}()
				}
				return
			}
			if atomic.AddInt64(&seen[p], 1) == int64(count) {
				finished[p].Do(func() { done <- nil })
			}
		}, opts...)
	}
	for p := 0; p < partitions; p++ {
		if err := subscribe(p); err != nil {
			return 0, err
		}
	}
	for p := 0; p < partitions; p++ {
		if err := <-done; err != nil {
			return 0, err
		}
	}
	return 0, nil
}

func fail(mode string, err error) {
	out, _ := json.Marshal(result{Mode: mode, Error: err.Error()})
	fmt.Println(string(out))
	os.Exit(1)
}

func messageOptions(ack string, partitions int, key string, header string) ([]lift.MessageOption, error) {
	var opts []lift.MessageOption
	if key != "" {
		opts = append(opts, lift.Key([]byte(key)))
	}
	if header != "" {
		// -header name=value: one header on every message.
		name, value, _ := strings.Cut(header, "=")
		opts = append(opts, lift.Header(name, []byte(value)))
	}
	switch ack {
	case "leader":
		opts = append(opts, lift.AckPolicyLeader())
	case "all":
		opts = append(opts, lift.AckPolicyAll())
	case "none":
		opts = append(opts, lift.AckPolicyNone())
	default:
		return nil, fmt.Errorf("unknown ack policy %q (leader, all, none)", ack)
	}
	if partitions > 1 {
		opts = append(opts, lift.PartitionByRoundRobin())
	}
	return opts, nil
}

// publishAsync keeps at most window messages in flight and counts acks in the
// ack handler, the way an application using PublishAsync would.
func publishAsync(ctx context.Context, c lift.Client, stream string, count int, value []byte,
	opts []lift.MessageOption, window int) (int64, error) {
	var errs int64
	var wg sync.WaitGroup
	// A window of 0 means no limit: PublishAsync itself has none.
	var slots chan struct{}
	if window > 0 {
		slots = make(chan struct{}, window)
	}
	handler := func(ack *lift.Ack, err error) {
		if err != nil {
			atomic.AddInt64(&errs, 1)
		}
		if slots != nil {
			<-slots
		}
		wg.Done()
	}
	for i := 0; i < count; i++ {
		if slots != nil {
			slots <- struct{}{}
		}
		wg.Add(1)
		if err := c.PublishAsync(ctx, stream, value, handler, opts...); err != nil {
			return errs, err
		}
	}
	wg.Wait()
	return errs, nil
}

// publishSync runs workers goroutines, each calling the blocking Publish. Publish
// waits for its ack whatever the context says once the request is on its gRPC stream,
// so a run in which no Publish returns for stall fails then, rather than at -timeout.
func publishSync(ctx context.Context, c lift.Client, stream string, count int, value []byte,
	opts []lift.MessageOption, workers int, stall time.Duration) (int64, error) {
	var errs, returned int64
	var next int64 = -1
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for atomic.AddInt64(&next, 1) < int64(count) {
				if _, err := c.Publish(ctx, stream, value, opts...); err != nil {
					atomic.AddInt64(&errs, 1)
					firstErr.CompareAndSwap(nil, err)
				}
				atomic.AddInt64(&returned, 1)
			}
		}()
	}
	finished := make(chan struct{})
	go func() {
		wg.Wait()
		close(finished)
	}()
	tick := time.NewTicker(stall)
	defer tick.Stop()
	last := int64(-1)
wait:
	for {
		select {
		case <-finished:
			break wait
		case <-tick.C:
			now := atomic.LoadInt64(&returned)
			if now == last {
				return errs, fmt.Errorf("stalled: no Publish returned for %s, %d of %d returned, "+
					"%d goroutines", stall, now, count, workers)
			}
			last = now
		}
	}
	if e, ok := firstErr.Load().(error); ok && errs == int64(count) {
		return errs, e
	}
	return errs, nil
}

// subscribe reads count messages from the start of one partition.
func subscribe(ctx context.Context, c lift.Client, stream string, partition int, count int) (int64, error) {
	done := make(chan error, 1)
	var seen int64
	var once sync.Once
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err := c.Subscribe(ctx, stream, func(msg *lift.Message, err error) {
		if err != nil {
			once.Do(func() { done <- err })
			return
		}
		if atomic.AddInt64(&seen, 1) == int64(count) {
			once.Do(func() { done <- nil })
		}
	}, lift.StartAtEarliestReceived(), lift.Partition(int32(partition)))
	if err != nil {
		return 0, err
	}
	if err := <-done; err != nil && atomic.LoadInt64(&seen) < int64(count) {
		return 0, err
	}
	return 0, nil
}

// stamp writes what an end-to-end message carries in its first 16 bytes: its
// sequence number and its scheduled send time (Unix ns), both big-endian.
func stamp(template []byte, seq int64, dueNS int64) []byte {
	value := make([]byte, len(template))
	copy(value, template)
	binary.BigEndian.PutUint64(value[0:8], uint64(seq))
	binary.BigEndian.PutUint64(value[8:16], uint64(dueNS))
	return value
}

// pacedPublish sends total messages at rate msg/s with PublishAsync, message i due
// at t0 + i/rate; each carries its due time, from which the reader measures, so a
// stall of the sender counts against it. Returns the rate it really sent at.
func pacedPublish(ctx context.Context, c lift.Client, stream string, total int, rate float64,
	template []byte, opts []lift.MessageOption) (float64, int64, error) {
	var errs int64
	var wg sync.WaitGroup
	handler := func(ack *lift.Ack, err error) {
		if err != nil {
			atomic.AddInt64(&errs, 1)
		}
		wg.Done()
	}
	t0 := time.Now().Add(50 * time.Millisecond)
	base := t0.UnixNano()
	due := func(i int) time.Duration { return time.Duration(float64(i) / rate * 1e9) }
	sent := 0
	for sent < total {
		elapsed := time.Since(t0)
		if elapsed >= 0 {
			ready := int(elapsed.Seconds()*rate) + 1
			if ready > total {
				ready = total
			}
			for ; sent < ready; sent++ {
				wg.Add(1)
				value := stamp(template, int64(sent), base+int64(due(sent)))
				if err := c.PublishAsync(ctx, stream, value, handler, opts...); err != nil {
					return 0, errs, err
				}
			}
		}
		if sent < total {
			time.Sleep(time.Until(t0.Add(due(sent))))
		}
	}
	sendRate := float64(total) / time.Since(t0).Seconds()
	wg.Wait()
	return sendRate, errs, nil
}

// e2eSubscribe reads the stream from its start until total messages arrived or
// deadline passed, and returns the latency of every message from warm on: its
// arrival in the callback minus the due time it carries. The file ready is
// created once the subscription exists (Subscribe returns then).
func e2eSubscribe(ctx context.Context, c lift.Client, stream string, total, warm int,
	ready string, deadline time.Duration) ([]int64, int, error) {
	samples := make([]int64, 0, total)
	var mu sync.Mutex
	arrived := 0
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err := c.Subscribe(ctx, stream, func(msg *lift.Message, err error) {
		now := time.Now().UnixNano()
		if err != nil {
			return
		}
		value := msg.Value()
		if len(value) < 16 {
			return
		}
		seq := int64(binary.BigEndian.Uint64(value[0:8]))
		dueNS := int64(binary.BigEndian.Uint64(value[8:16]))
		mu.Lock()
		defer mu.Unlock()
		arrived++
		if seq >= int64(warm) {
			samples = append(samples, (now-dueNS)/1000)
		}
		if arrived == total {
			close(done)
		}
	}, lift.StartAtEarliestReceived())
	if err != nil {
		return nil, 0, err
	}
	if ready != "" {
		if err := os.WriteFile(ready, []byte("ready\n"), 0o644); err != nil {
			return nil, 0, err
		}
	}
	select {
	case <-done:
	case <-time.After(deadline):
	case <-ctx.Done():
	}
	cancel()
	mu.Lock()
	defer mu.Unlock()
	return append([]int64(nil), samples...), arrived, nil
}

// endToEnd runs the e2e-publish and e2e-subscribe modes, which print their own result.
func endToEnd(ctx context.Context, c lift.Client, mode, stream string, total, warm int, rate float64,
	template []byte, opts []lift.MessageOption, ready string, deadline time.Duration) {
	cpu0 := cpuSeconds()
	start := time.Now()
	out := result{Mode: mode}
	switch mode {
	case "e2e-publish":
		sendRate, errs, err := pacedPublish(ctx, c, stream, total, rate, template, opts)
		if err != nil {
			fail(mode, err)
		}
		out.Count, out.Errors, out.SendRate = total, errs, sendRate
	case "e2e-subscribe":
		samples, arrived, err := e2eSubscribe(ctx, c, stream, total, warm, ready, deadline)
		if err != nil {
			fail(mode, err)
		}
		out.Count, out.Errors, out.SamplesUS = arrived, int64(total-arrived), samples
	}
	out.Seconds = time.Since(start).Seconds()
	out.CPUSeconds = cpuSeconds() - cpu0
	if out.Count > 0 {
		out.Rate = float64(out.Count) / out.Seconds
		out.CPUPerMsg = out.CPUSeconds / float64(out.Count) * 1e6
	}
	out.MaxRSSKiB = maxRSS()
	data, _ := json.Marshal(out)
	fmt.Println(string(data))
}

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9292", "comma-separated Liftbridge broker addresses")
	stream := flag.String("stream", "", "stream name (created by the caller)")
	count := flag.Int("count", 10000, "messages to publish or read")
	warmup := flag.Int("warmup", 0, "messages published before the timed run")
	size := flag.Int("size", 100, "value size in bytes")
	ack := flag.String("ack", "leader", "ack policy: leader, all or none")
	mode := flag.String("mode", "async", "async (PublishAsync), sync (Publish), subscribe, fanout (every partition), "+
		"e2e-publish (PublishAsync at -rate) or e2e-subscribe (latency of what e2e-publish sent)")
	partitions := flag.Int("partitions", 1, "partition count of the stream (round-robin when > 1)")
	partition := flag.Int("partition", 0, "partition to read in subscribe mode")
	window := flag.Int("window", 0, "PublishAsync: most messages in flight (0: no limit)")
	workers := flag.Int("workers", 1, "Publish: concurrent goroutines")
	stall := flag.Duration("stall", 30*time.Second, "Publish: fail when no call returns for this long")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after this long")
	key := flag.String("key", "", "a key on every message (none by default)")
	header := flag.String("header", "", "name=value: a header on every message (none by default)")
	rate := flag.Float64("rate", 1000, "e2e-publish: messages per second")
	ready := flag.String("ready", "", "e2e-subscribe: file created once the subscription exists")
	warmE2E := flag.Int("skip", 0, "e2e-subscribe: leading messages (the warm-up) not timed")
	deadline := flag.Duration("deadline", time.Minute, "e2e-subscribe: stop reading after this long")
	flag.Parse()
	if *stream == "" {
		fail(*mode, fmt.Errorf("-stream is required"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	client, err := lift.Connect(strings.Split(*brokers, ","))
	if err != nil {
		fail(*mode, err)
	}
	defer client.Close()
	value := make([]byte, *size)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	opts, err := messageOptions(*ack, *partitions, *key, *header)
	if err != nil {
		fail(*mode, err)
	}
	if strings.HasPrefix(*mode, "e2e-") {
		if *size < 16 {
			fail(*mode, fmt.Errorf("-size must be at least 16 in the end-to-end modes"))
		}
		endToEnd(ctx, client, *mode, *stream, *count, *warmE2E, *rate, value, opts, *ready, *deadline)
		return
	}
	var threads, resubscribes int64
	run := func(n int) (int64, error) {
		switch *mode {
		case "async":
			return publishAsync(ctx, client, *stream, n, value, opts, *window)
		case "sync":
			return publishSync(ctx, client, *stream, n, value, opts, *workers, *stall)
		case "subscribe":
			return subscribe(ctx, client, *stream, *partition, n)
		case "fanout":
			return fanout(ctx, client, *stream, *partitions, n, &threads, &resubscribes)
		}
		return 0, fmt.Errorf("unknown mode %q (async, sync, subscribe, fanout)", *mode)
	}
	if *warmup > 0 && *mode != "subscribe" && *mode != "fanout" {
		if _, err := run(*warmup); err != nil {
			fail(*mode, err)
		}
	}
	cpu0 := cpuSeconds()
	start := time.Now()
	errs, err := run(*count)
	elapsed := time.Since(start).Seconds()
	cpu := cpuSeconds() - cpu0
	if err != nil {
		fail(*mode, err)
	}
	total := *count
	if *mode == "fanout" {
		total = *count * *partitions // -count is per partition there
	}
	out, _ := json.Marshal(result{
		Mode: *mode, Count: total, Errors: errs, Seconds: elapsed,
		Rate: float64(total) / elapsed, CPUSeconds: cpu, MaxRSSKiB: maxRSS(),
		CPUPerMsg: cpu / float64(total) * 1e6, Threads: threads, Resubs: resubscribes,
	})
	fmt.Println(string(out))
}
