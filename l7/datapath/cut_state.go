package datapath

// ResponseCutter is implemented by a kernel Datapath.
type ResponseCutter interface {
	// CutResponse stops the kernel from carrying any more of x's response
	// to the client, waits until what it carried has reached the client's
	// socket, and says what the client got. known is false when the
	// kernel did not carry this response's last bytes (the shim relayed
	// them: its own state holds).
	CutResponse(x *Exchange) (cs CutState, known bool)
}

// CutState is what a client got of a response that was cut.
type CutState struct {
	Began      bool // the response head reached it
	Chunked    bool // the body is chunked
	AtBoundary bool // the bytes it got end between two chunks
	// Status is the response's status as the kernel parsed the head it
	// carried (0: the shim read the head itself, or it is not known): the
	// status the client got, for the access log.
	Status int
}
