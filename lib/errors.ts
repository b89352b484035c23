/** Base class of every error the domain raises on purpose; `expose` says whether its message may reach a client. */
export class AppError extends Error {
  readonly status: number;
  readonly code: string;
  /** Fields a client needs beside the message (a conflict's current log size, say). */
  details?: Record<string, unknown>;
  get expose(): boolean {
    return this.status < 500;
  }
  constructor(status: number, code: string, message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
    this.status = status;
    this.code = code;
  }
}

export class BadRequestError extends AppError {
  constructor(message: string, options?: ErrorOptions) {
    super(400, 'bad_request', message, options);
  }
}

export class UnauthorizedError extends AppError {
  constructor(message = 'missing or invalid credentials', options?: ErrorOptions) {
    super(401, 'unauthorized', message, options);
  }
}

export class ForbiddenError extends AppError {
  constructor(message: string, options?: ErrorOptions) {
    super(403, 'forbidden', message, options);
  }
}

export class NotFoundError extends AppError {
  constructor(message: string, options?: ErrorOptions) {
    super(404, 'not_found', message, options);
  }
}

/** A state conflict: a stale lease, a duplicate id, or a transaction that kept losing serialization races. */
export class ConflictError extends AppError {
  constructor(message: string, options?: ErrorOptions) {
    super(409, 'conflict', message, options);
  }
}

/** How long a client should wait before sending an unavailable request again (`Retry-After`). */
export const RETRY_AFTER_S = {
  /** One request's bad luck: a lock held, a conflict, a connection lost; the next try gets a fresh chance. */
  soon: 1,
  /** The database did not answer at all within its bound; asking again at once only queues more waits. */
  silent: 5,
} as const;

/** The request could not be served now (out of time, the database away); sent again it may be. */
export class UnavailableError extends AppError {
  /** Seconds the client should wait before trying again (the `Retry-After` header). */
  readonly retryAfterS: number;
  constructor(message: string, options?: ErrorOptions & { retryAfterS?: number }) {
    super(503, 'unavailable', message, options);
    this.retryAfterS = options?.retryAfterS ?? RETRY_AFTER_S.soon;
  }
  // The message says nothing about the data, and tells the client to retry.
  override get expose(): boolean {
    return true;
  }
}

export class PayloadTooLargeError extends AppError {
  constructor(message: string, options?: ErrorOptions) {
    super(413, 'payload_too_large', message, options);
  }
}

/** One problem found while validating input, with the path of the field it concerns. */
export interface ValidationIssue {
  path: string;
  message: string;
}

/** Input that parsed but broke a rule; carries every issue found, each naming its field. */
export class ValidationError extends AppError {
  readonly issues: ValidationIssue[];
  constructor(issues: ValidationIssue[], options?: ErrorOptions) {
    super(
      400,
      'bad_request',
      issues.map((i) => (i.path ? `${i.path}: ${i.message}` : i.message)).join('; '),
      options,
    );
    this.issues = issues;
  }
}
