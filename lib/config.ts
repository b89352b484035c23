import { z } from 'zod';

// The environment, validated once at cold start. Every variable is listed in
// the README's configuration table; a bad value fails fast naming the variable.

const positiveInt = (max: number) => z.coerce.number().int().min(1).max(max);

export const ConfigSchema = z.object({
  DATABASE_URL: z
    .string()
    .regex(/^postgres(ql)?:\/\//, 'must be a postgres:// or postgresql:// URL')
    .optional(),
  CONDUCTOR_DATA_DIR: z.string().min(1).default('.conductor'),
  CONDUCTOR_DB_POOL_MAX: positiveInt(1000).default(10),
});
export type Config = Readonly<z.infer<typeof ConfigSchema>>;

/** Raised for an environment variable that is present but wrong. */
export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConfigError';
  }
}

/** Reads and validates the configuration from `env`; an empty string counts as unset. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const present = Object.fromEntries(
    Object.keys(ConfigSchema.shape)
      .filter((k) => env[k] !== undefined && env[k] !== '')
      .map((k) => [k, env[k]]),
  );
  const parsed = ConfigSchema.safeParse(present);
  if (!parsed.success) {
    throw new ConfigError(
      parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; '),
    );
  }
  return Object.freeze(parsed.data);
}
