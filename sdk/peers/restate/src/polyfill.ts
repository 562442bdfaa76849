// The Restate TypeScript SDK 1.17 calls `Promise.withResolvers`, which Node
// has only from version 22. On Node 20 (this machine's) it is added here, with
// the same behaviour as the built-in.
const P = Promise as unknown as { withResolvers?: unknown };
if (typeof P.withResolvers !== "function") {
  P.withResolvers = function <T>() {
    let resolve!: (value: T | PromiseLike<T>) => void;
    let reject!: (reason?: unknown) => void;
    const promise = new Promise<T>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    return { promise, resolve, reject };
  };
}
export {};
