CREATE TABLE elements (
	id VARCHAR(255) NOT NULL,
	thread_id VARCHAR(255) NOT NULL,
	for_id VARCHAR(255),
	data JSON NOT NULL,
	content BLOB,
	PRIMARY KEY (id),
	FOREIGN KEY(thread_id) REFERENCES threads (id) ON DELETE CASCADE
);
CREATE INDEX elements_for ON elements (for_id);
CREATE INDEX elements_thread ON elements (thread_id);
CREATE TABLE feedback (
	id VARCHAR(255) NOT NULL,
	thread_id VARCHAR(255) NOT NULL,
	step_id VARCHAR(255) NOT NULL,
	value INTEGER NOT NULL,
	comment TEXT,
	created_at DATETIME NOT NULL,
	updated_at DATETIME NOT NULL,
	PRIMARY KEY (id),
	FOREIGN KEY(thread_id) REFERENCES threads (id) ON DELETE CASCADE
);
CREATE INDEX feedback_step ON feedback (step_id);
CREATE INDEX feedback_updated ON feedback (updated_at);
CREATE TABLE schema_version (
	version INTEGER NOT NULL,
	applied_at DATETIME NOT NULL,
	description TEXT NOT NULL,
	PRIMARY KEY (version)
);
CREATE TABLE steps (
	seq INTEGER NOT NULL,
	id VARCHAR(255) NOT NULL,
	thread_id VARCHAR(255) NOT NULL,
	created_at VARCHAR(64) NOT NULL,
	type VARCHAR(64),
	data JSON NOT NULL,
	PRIMARY KEY (seq),
	UNIQUE (id),
	FOREIGN KEY(thread_id) REFERENCES threads (id) ON DELETE CASCADE
);
CREATE INDEX steps_thread_order ON steps (thread_id, created_at, seq);
CREATE TABLE threads (
	id VARCHAR(255) NOT NULL,
	user_identifier VARCHAR(255),
	name TEXT,
	created_at DATETIME NOT NULL,
	updated_at DATETIME NOT NULL,
	metadata JSON NOT NULL,
	tags JSON NOT NULL,
	PRIMARY KEY (id)
);
CREATE INDEX threads_updated ON threads (updated_at);
CREATE INDEX threads_user_updated ON threads (user_identifier, updated_at);
CREATE TABLE users (
	id VARCHAR(255) NOT NULL,
	identifier VARCHAR(255) NOT NULL,
	created_at DATETIME NOT NULL,
	metadata JSON NOT NULL,
	PRIMARY KEY (id),
	UNIQUE (identifier)
);
