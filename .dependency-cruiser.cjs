/**
 * The layers of src/ and the arrows allowed between them, read from the imports by dependency-cruiser
 * (test/unit/layers.test.ts runs it in `bun test`). Arrows point one way:
 *
 *   command line (index.ts, cmd/) -> server (server/: the app, one server's life, the takeover and the
 *     wiring beside them; and config.ts, the flags)
 *     -> HTTP (plugins/, http/, observability/, the modules' controllers) -> modules' services -> domain/
 *   storage/ and limiter/ sit below the modules: they implement what the domain declares and may
 *   import only the domain and their own helpers (storage also os/, what it asks the operating system).
 *   Outside storage/, each engine (storage/sqlite/, storage/postgres/) is reached through its index alone.
 *
 * Every file of src/ is in one of the rooms of LAYERS (test/unit/layers.test.ts checks it), so a new
 * file cannot slip past the arrows by sitting where no rule looks. Type-only imports count (tsPreCompilationDeps):
 * a type is an arrow too.
 */
const LAYERS = {
  'command line': '^src/index\\.ts$|^src/cmd/',
  server: '^src/config\\.ts$|^src/server/',
  http: '^src/(plugins|http|observability)/',
  modules: '^src/modules/',
  storage: '^src/storage/',
  limiter: '^src/limiter/',
  domain: '^src/domain/',
  'operating system': '^src/os/',
  flags: '^src/flags/',
}
const TOP = LAYERS['command line']
const SERVER = LAYERS.server
const BELOW_SERVER = '^src/(domain|os|flags|storage|limiter|modules|plugins|http|observability)/'

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      comment: 'Modules that import each other, directly or around a ring, cannot be understood or built apart.',
      severity: 'error',
      from: { path: '^src/' },
      to: { circular: true },
    },
    {
      name: 'domain-at-the-ground',
      comment: 'The domain (Pet, plans, keys, idempotency, the repository interfaces) imports nothing of ours.',
      severity: 'error',
      from: { path: '^src/domain/' },
      to: { path: '^src/', pathNot: '^src/domain/' },
    },
    {
      name: 'flags-below-server-and-commands',
      comment: 'The flag framework (rows, reader, usage lines) is shared by the server and the commands: it knows neither.',
      severity: 'error',
      from: { path: '^src/flags/' },
      to: { path: '^src/', pathNot: '^src/(flags|domain)/' },
    },
    {
      name: 'os-at-the-ground',
      comment: 'What petstore asks the operating system (process states, user names) imports nothing of ours.',
      severity: 'error',
      from: { path: '^src/os/' },
      to: { path: '^src/', pathNot: '^src/os/' },
    },
    {
      name: 'storage-below-the-modules',
      comment: 'Storage implements the domain\'s repositories and returns data; it never calls up.',
      severity: 'error',
      from: { path: '^src/storage/' },
      to: { path: '^src/', pathNot: '^src/(domain|os|storage)/' },
    },
    {
      name: 'each-engine-behind-its-index',
      comment: 'Outside storage/, an engine is reached through its index alone: what lies behind it may move freely.',
      severity: 'error',
      from: { path: '^src/', pathNot: '^src/storage/' },
      to: { path: '^src/storage/(sqlite|postgres)/', pathNot: '^src/storage/(sqlite|postgres)/index\\.ts$' },
    },
    {
      name: 'storage-backends-apart',
      comment: 'The SQLite and PostgreSQL backends share only the domain and storage/ helpers.',
      severity: 'error',
      from: { path: '^src/storage/(sqlite|postgres)/' },
      to: { path: '^src/storage/(sqlite|postgres)/', pathNot: '^src/storage/$1/' },
    },
    {
      name: 'storage-shared-knows-no-engine',
      comment: 'storage/shared/ is SQL both engines run alike; what differs is each engine\'s runner, which imports it.',
      severity: 'error',
      from: { path: '^src/storage/shared/' },
      to: { path: '^src/storage/(sqlite|postgres)/' },
    },
    {
      name: 'limiter-below-the-modules',
      comment: 'The rate limiter and its backends import only the domain and their own helpers.',
      severity: 'error',
      from: { path: '^src/limiter/' },
      to: { path: '^src/', pathNot: '^src/(domain|limiter)/' },
    },
    {
      name: 'modules-use-storage-through-the-domain',
      comment: 'Modules see storage and the limiter only through the interfaces the domain declares.',
      severity: 'error',
      from: { path: '^src/modules/' },
      to: { path: '^src/(storage|limiter)/' },
    },
    {
      name: 'services-never-see-http',
      comment: 'A service (every file of a module but its controller, the controller/ folder it is split into, and its OpenAPI document) knows nothing of Elysia or the request: it may throw the API\'s typed errors, no more.',
      severity: 'error',
      from: { path: '^src/modules/', pathNot: '^src/modules/[^/]+/((index|document)\\.ts$|controller/)' },
      to: { path: '^src/(plugins|observability|modules/[^/]+/index\\.ts$)|^src/http/(?!api-errors\\.ts$)|(^|/)node_modules/elysia/' },
    },
    {
      name: 'plugins-below-the-modules',
      comment: 'Plugins are given what they use (the key look-ups, the limiter) as the domain declares it; they import no module.',
      severity: 'error',
      from: { path: '^src/plugins/' },
      to: { path: '^src/modules/' },
    },
    {
      name: 'controllers-never-reach-the-gate',
      comment: 'The server puts the gate around the API; a route reads the key it found from the request\'s record (plugins/request-info.ts).',
      severity: 'error',
      from: { path: '^src/modules/' },
      to: { path: '^src/plugins/gate\\.ts$' },
    },
    {
      name: 'http-helpers-at-the-bottom-of-http',
      comment: 'http/ holds what every HTTP piece uses (errors, bodies, addresses, OpenAPI parts): it uses none of them.',
      severity: 'error',
      from: { path: '^src/http/' },
      to: { path: '^src/(plugins|modules|observability)/' },
    },
    {
      name: 'observability-below-the-plugins',
      comment: 'Logs and metrics are recorded by the plugins; they do not reach back into them.',
      severity: 'error',
      from: { path: '^src/observability/' },
      to: { path: '^src/(plugins|modules)/' },
    },
    {
      name: 'nothing-below-reaches-the-server',
      comment: 'The server assembles the layers below it and reads the config; they are given what they need.',
      severity: 'error',
      from: { path: BELOW_SERVER },
      to: { path: `${SERVER}|${TOP}` },
    },
    {
      name: 'command-line-on-top',
      comment: 'Only the entry point reaches the command line.',
      severity: 'error',
      from: { path: '^src/', pathNot: TOP },
      to: { path: TOP },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    exclude: { path: '\\.d\\.ts$' },
  },
}
// Not a key of the configuration (dependency-cruiser refuses unknown ones): the layers test reads it.
Object.defineProperty(module.exports, 'layers', { value: LAYERS })
