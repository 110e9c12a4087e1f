package kvpb

import (
	"context"
	"errors"
	"io"
	"runtime"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	// maxBatchResponseBytes bounds the values one BatchResponse gathers
	// (a single larger result is sent alone), and maxBatchResults its
	// results.
	maxBatchResponseBytes = 1 << 20
	maxBatchResults       = 1024
)

// ServeBatch serves one Batch stream (KV.Batch). For each BatchRequest it
// calls serve, from the goroutine that reads the stream (so serve must not
// block: it starts the goroutines it needs), and serve calls answer exactly
// once per operation of the request, with its result (Id set), from any
// goroutine. One sender gathers whatever results are ready into each
// BatchResponse. At most maxInFlight operations are in flight at once;
// the operations of a request beyond that are answered ResourceExhausted
// without reaching serve. ServeBatch returns once the client closed its
// side and every operation was answered (nil), or once the stream broke
// and every operation was answered (the error).
//
// header, if not nil, gives each BatchResponse its header (the answering
// node's); serve should then leave the results' own headers empty.
func ServeBatch(stream KV_BatchServer, maxInFlight int, serve func(req *BatchRequest, answer func(*BatchResult)), header func() *ResponseHeader) error {
	return serveBatch(stream, maxInFlight, serve, header, nil)
}

// serveBatch is ServeBatch; admit, if not nil (tests), is told how many
// operations each request found in flight on the stream.
func serveBatch(stream KV_BatchServer, maxInFlight int, serve func(req *BatchRequest, answer func(*BatchResult)), header func() *ResponseHeader, admit func(inFlight int64)) error {
	results := make(chan *BatchResult, 4096)
	sent := make(chan error, 1)
	go func() { sent <- sendBatchResults(stream, results, header) }()
	var (
		ops      sync.WaitGroup
		inFlight atomic.Int64
		recvErr  error
	)
	answer := func(r *BatchResult) {
		// An operation is in flight until its result is queued: one
		// whose answer waits for room (the client does not read its
		// responses) still holds a goroutine, so it counts.
		results <- r
		inFlight.Add(-1)
		ops.Done()
	}
	for {
		req, err := stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				recvErr = err
			}
			break
		}
		cur := inFlight.Load()
		if admit != nil {
			admit(cur)
		}
		if over := cur + int64(len(req.Ops)) - int64(maxInFlight); over > 0 {
			keep := max(len(req.Ops)-int(over), 0)
			for _, op := range req.Ops[keep:] {
				results <- &BatchResult{Id: op.Id, Code: uint32(codes.ResourceExhausted),
					Message: "batch: over the server's limit of operations in flight on one stream; retry"}
			}
			req.Ops = req.Ops[:keep]
		}
		if len(req.Ops) == 0 {
			continue
		}
		inFlight.Add(int64(len(req.Ops)))
		ops.Add(len(req.Ops))
		serve(req, answer)
	}
	ops.Wait()
	close(results)
	if err := <-sent; err != nil {
		return err
	}
	return recvErr
}

// ServeEach is a serve function for ServeBatch that runs every operation
// in a goroutine of its own through do.
func ServeEach(do func(*BatchOp) *BatchResult) func(*BatchRequest, func(*BatchResult)) {
	return func(req *BatchRequest, answer func(*BatchResult)) {
		for _, op := range req.Ops {
			go func() { answer(do(op)) }()
		}
	}
}

// sendBatchResults sends what arrives on results, as many as are ready per
// BatchResponse, until results is closed. After a failed send it drains
// results (the operations still finish) and returns the error.
func sendBatchResults(stream KV_BatchServer, results <-chan *BatchResult, header func() *ResponseHeader) error {
	var err error
	for r := range results {
		if err != nil {
			continue
		}
		resp := &BatchResponse{Results: []*BatchResult{r}}
		size := resultBytes(r)
		if len(results) == 0 {
			// Let operations that are about to answer (those the same
			// round or commit finished) do so, so that they share this
			// response.
			runtime.Gosched()
		}
	gather:
		for len(resp.Results) < maxBatchResults && size < maxBatchResponseBytes {
			select {
			case more, ok := <-results:
				if !ok {
					break gather
				}
				resp.Results = append(resp.Results, more)
				size += resultBytes(more)
			default:
				break gather
			}
		}
		if header != nil {
			resp.Header = header()
		}
		err = stream.Send(resp)
	}
	return err
}

// resultBytes approximates the encoded size of r: its values, keys and
// message, plus a fixed allowance for the headers.
func resultBytes(r *BatchResult) int {
	n := 64 + len(r.Message)
	switch x := r.Result.(type) {
	case *BatchResult_Get:
		n += len(x.Get.Value)
	case *BatchResult_Scan:
		for _, kv := range x.Scan.Kvs {
			n += len(kv.Key) + len(kv.Value) + 8
		}
	}
	return n
}

// BatchOpServer is what serves the operations of a Batch stream: the
// unary methods of KVServer.
type BatchOpServer interface {
	Put(context.Context, *PutRequest) (*PutResponse, error)
	Get(context.Context, *GetRequest) (*GetResponse, error)
	Delete(context.Context, *DeleteRequest) (*DeleteResponse, error)
	Scan(context.Context, *ScanRequest) (*ScanResponse, error)
}

// ServeBatchOp serves op through srv's unary method of its kind and
// returns its result; an operation without a request is InvalidArgument.
func ServeBatchOp(ctx context.Context, srv BatchOpServer, op *BatchOp) *BatchResult {
	var (
		resp any
		err  error
	)
	switch x := op.Op.(type) {
	case *BatchOp_Put:
		resp, err = srv.Put(ctx, x.Put)
	case *BatchOp_Get:
		resp, err = srv.Get(ctx, x.Get)
	case *BatchOp_Delete:
		resp, err = srv.Delete(ctx, x.Delete)
	case *BatchOp_Scan:
		resp, err = srv.Scan(ctx, x.Scan)
	default:
		err = status.Errorf(codes.InvalidArgument, "batch: operation %d has no request", op.Id)
	}
	return NewBatchResult(op.Id, resp, err)
}

// ClearHeader empties the header of r's response (BatchResponse.header
// stands for it).
func (r *BatchResult) ClearHeader() {
	switch x := r.Result.(type) {
	case *BatchResult_Put:
		x.Put.Header = nil
	case *BatchResult_Get:
		x.Get.Header = nil
	case *BatchResult_Delete:
		x.Delete.Header = nil
	case *BatchResult_Scan:
		x.Scan.Header = nil
	}
}

// NewBatchResult is the result of operation id that answered resp (a
// *PutResponse, *GetResponse, *DeleteResponse or *ScanResponse) or failed
// with err (its gRPC status goes into Code and Message).
func NewBatchResult(id uint64, resp any, err error) *BatchResult {
	r := &BatchResult{Id: id}
	if err != nil {
		st := status.Convert(err)
		r.Code, r.Message = uint32(st.Code()), st.Message()
		return r
	}
	switch x := resp.(type) {
	case *PutResponse:
		r.Result = &BatchResult_Put{Put: x}
	case *GetResponse:
		r.Result = &BatchResult_Get{Get: x}
	case *DeleteResponse:
		r.Result = &BatchResult_Delete{Delete: x}
	case *ScanResponse:
		r.Result = &BatchResult_Scan{Scan: x}
	default:
		r.Code, r.Message = uint32(codes.Internal), "batch: no result"
	}
	return r
}
