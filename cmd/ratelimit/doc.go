// Command ratelimit validates rules files and inspects or resets buckets in
// Redis.
//
//	ratelimit validate FILE...
//	ratelimit inspect -redis ADDR [-prefix P] [-secret-file F] -rules FILE -rule NAME [-plan PLAN] -key ID
//	ratelimit reset   -redis ADDR [-prefix P] [-secret-file F] -rules FILE -rule NAME [-plan PLAN] -key ID
//
// validate parses each rules file (see package
// github.com/bucketry/ratelimit/rules) and prints its rules as compiled:
// name, scope, limit, plan, routes, shadow and active. A bad file is
// reported as file:line: rule: field: reason, and the exit status is 1.
//
// inspect reads the bucket of rule NAME and identity ID in the Redis store
// (package github.com/bucketry/ratelimit/adapters/goredis) without
// consuming anything, a take of cost 0, with the limit the rules file
// gives the rule, and prints the tokens remaining and the time until the
// bucket is full. reset deletes the bucket, which is then full. -prefix
// is the store's key prefix (WithPrefix), "ratelimit" by default; -plan
// picks the rule when rules of one name exist for several plans; a global
// rule's one bucket has the identity "*", the default -key for one. ADDR
// is host:port, or several comma-separated for a Cluster. -timeout bounds
// the Redis call (default 5s).
//
// A store made with WithHashedIdentities keys each bucket by
// HMAC-SHA-256(secret, identity). inspect and reset then need the same
// secret: the bytes of the file -secret-file names, exactly (a final
// newline is part of the secret), or the value of the environment variable
// RATELIMIT_IDENTITY_SECRET; giving both is a usage error. The secret is
// never a flag's value, which other users see in ps and shells keep in
// their history. Without it the command cannot tell that the store hashes
// identities: it reads and deletes the key with the identity in clear,
// which the limiter does not use, and reports a full bucket.
//
// The exit status is 0 on success, 1 when a file is invalid or Redis
// fails, 2 for a usage error.
package main
