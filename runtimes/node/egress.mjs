// The in-sandbox end of egress (started before the harness binds, for workers of egress runtimes only;
// the host's side is evaluator_host/sandbox/egress/proxy.py).

// Forward 127.0.0.1:port (the sandbox's own loopback, named by HTTP(S)_PROXY) to the host's egress
// proxy at socketPath: bytes only, every decision is the host proxy's.
export async function forwardEgress(socketPath, port) {
  const net = await import('node:net');
  const server = net.createServer({ allowHalfOpen: true }, (client) => {
    const upstream = net.connect({ path: socketPath, allowHalfOpen: true });
    const drop = () => { client.destroy(); upstream.destroy(); };
    client.on('error', drop);
    upstream.on('error', drop);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  server.unref();
  await new Promise((resolve, reject) => server.listen(port, '127.0.0.1', resolve).on('error', reject));
}
