-- A call the price book prices at exactly $0 holds 0 (core.amounts.held): a reservation's
-- amount may be 0. Every other Reserve still holds at least 1.
ALTER TABLE reservations DROP CONSTRAINT reservations_amount_check;
ALTER TABLE reservations ADD CONSTRAINT reservations_amount_check CHECK (amount >= 0);
