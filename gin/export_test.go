package ginlimit

// MarkKey is the key the middleware keeps a request's Mark under in
// c.Keys, for the tests that check what it leaves there.
var MarkKey any = markKey
