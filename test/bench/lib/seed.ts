/**
 * A fresh data file for the benchmark: a key through the petstore CLI (which also creates the schema),
 * then the pets straight into the `pets` table, which is much faster than the API.
 */
import { Database } from 'bun:sqlite'
import { cleanEnv } from './procs'

function createKey(cli: string[], dataFile: string, args: string[], storage = ['--data', dataFile]): string {
  const result = Bun.spawnSync([...cli, 'keys', 'create', ...storage, ...args], { env: cleanEnv(), stdout: 'pipe', stderr: 'pipe' })
  if (result.exitCode !== 0) throw new Error(`petstore keys create failed: ${result.stderr.toString()}`)
  return result.stdout.toString().trim().split('\n').at(-1)!
}

const ENTERPRISE = ['--plan', 'enterprise', '--rpm', '1000000000', '--rpd', '1000000000', '--name', 'bench']
const NAMES = ['Rex', 'Bella', 'Milo', 'Luna', 'Max', 'Daisy', 'Charlie', 'Coco', 'Rocky', 'Nala', 'Ziggy', 'Pépé']
/** 60 % available, 20 % pending, 20 % sold. */
const STATUSES = ['available', 'available', 'available', 'available', 'available', 'available', 'pending', 'pending', 'sold', 'sold']

/**
 * `cli` runs the petstore command line, e.g. [dist/petstore] or [bun, src/index.ts]. Returns the secret
 * of an Enterprise key whose limits are out of reach.
 */
export function seed(cli: string[], dataFile: string, pets: number): string {
  const key = createKey(cli, dataFile, ENTERPRISE)
  const db = new Database(dataFile)
  try {
    db.run('PRAGMA busy_timeout = 5000')
    const insert = db.prepare('INSERT INTO pets (name, category_id, status, created_at) VALUES (?, ?, ?, ?)')
    const now = Date.now()
    db.transaction(() => {
      for (let i = 0; i < pets; i++) insert.run(`${NAMES[i % NAMES.length]} ${i + 1}`, (i % 40) + 1, STATUSES[i % STATUSES.length]!, now)
    })()
    db.run('PRAGMA wal_checkpoint(TRUNCATE)')
  } finally {
    db.close()
  }
  return key
}

export function countPets(dataFile: string): number {
  const db = new Database(dataFile)
  try {
    return db.query<{ n: number }, []>('SELECT count(*) AS n FROM pets').get()!.n
  } finally {
    db.close()
  }
}

/** The same for PostgreSQL: the key through the CLI (which migrates), pets in one multi-row insert per 5,000. */
export async function seedPostgres(cli: string[], databaseUrl: string, pets: number): Promise<string> {
  const key = createKey(cli, '', ENTERPRISE, ['--database-url', databaseUrl])
  const sql = new Bun.SQL(databaseUrl, { max: 1 })
  try {
    const now = Date.now()
    for (let start = 0; start < pets; start += 5_000) {
      const rows = Array.from({ length: Math.min(5_000, pets - start) }, (_, j) => {
        const i = start + j
        return {
          id: i + 1,
          name: `${NAMES[i % NAMES.length]} ${i + 1}`,
          category_id: (i % 40) + 1,
          status: STATUSES[i % STATUSES.length]!,
          created_at: now,
        }
      })
      await sql`INSERT INTO pets ${sql(rows)}`
    }
    await sql`SELECT setval('pets_id_seq', ${pets})`
  } finally {
    await sql.close()
  }
  return key
}

export async function countPostgresPets(databaseUrl: string): Promise<number> {
  const sql = new Bun.SQL(databaseUrl, { max: 1 })
  try {
    const [row] = await sql`SELECT count(*) AS n FROM pets`
    return Number(row.n)
  } finally {
    await sql.close()
  }
}
